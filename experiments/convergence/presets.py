"""Presets of the convergence experiment: dotted Config overrides of the ``tiny`` base (model shape,
training with dense checkpoints, data source), the per-width overrides, and the measurement
knobs that are not Config fields."""

from __future__ import annotations

import dataclasses

from sbjax.config import TrainConfig
from sbjax.experiment import Preset
from sbjax.optim import steps_for_gamma


@dataclasses.dataclass(frozen=True)
class Rule:
  """The pre-registered decision (``stats.decide``), written before the cpu run. A model's
  number: the median over its layers (MLP and OV) of the stabilisation fraction. **D2** (larger
  models stabilise earlier) at the primary cell (``level``, probe batch ``probe``): Spearman
  ρ(width, median) over the models, exact two-sided permutation p; ρ < 0 with p ≤ ``alpha``
  supports, ρ > 0 with p ≤ alpha refutes, else undecided; no order claim with fewer than
  ``min_order`` widths and seeds per width (3 widths × 2 seeds: only a perfect order reaches
  p ≤ 0.05, p = 16/720). **D3** (low-PER layers stabilise later): the stratified Spearman T of
  (``per``, stabilisation step at 0.9, probe 0), T < 0 with p ≤ alpha supports, T > 0 refutes,
  else undecided. Other levels and probes are reported and decide nothing."""

  level: float = 0.9
  probe: int = 0
  alpha: float = 0.05
  min_order: int = 3
  per: str = "per_head_dim_final"


@dataclasses.dataclass(frozen=True)
class Knobs:
  widths: tuple
  seeds: tuple = (0,)  # train.seed of each width's members (one vmapped group per width)
  rule: Rule = Rule()
  per_width: dict = dataclasses.field(default_factory=dict)  # override key -> one value per width
  n_sequences: int = 128  # the fixed batch (last-token CKA)
  all_sequences: int = 32  # sequences of the all-token CKA (0: all n_sequences)
  grad_per: bool = False  # PER of the gradients on the fixed batch
  group_size: int = 4  # checkpoints per compiled forward
  chunk: int = 32  # sequences per forward call
  # disjoint probe batches of n_sequences (the next validation windows; beyond the first:
  # last-token, biased CKA only), so a stabilisation step that moves with the batch shows
  probe_batches: int = 2


# the keys the presets share, dotted over ``tiny`` (a preset replaces some of them)
BASE = {"model.vocab_size": 0, "model.n_layers": 4, "model.n_heads": 4, "train.seq_len": 64,
        "train.eval_batches": 2, "train.ckpt_log_spaced": True, "data.source": "text",
        "data.options.vocab_size": 1024}


def overrides(o: dict) -> dict:
  """BASE with ``o`` over it, model.max_len = train.seq_len, one eval at the end, 20 log lines.
  Checkpoints: log-spaced 0, 1, 2, ..., 512 plus one every train.ckpt_every steps."""
  o = {**BASE, **o}
  return {**o, "model.max_len": o["train.seq_len"], "train.eval_every": o["train.steps"],
          "train.log_every": max(1, o["train.steps"] // 20)}


def gamma_overrides(o: dict, target: float) -> dict:
  """``overrides(o)`` trained for Γ = ``target`` by Pythia's recipe (λ = 0.1, 1% warm-up,
  cosine to 10%; ``sbjax.optim.steps_for_gamma``) at o's train.lr: its steps and warm-up."""
  tc = steps_for_gamma(TrainConfig(lr=o["train.lr"], weight_decay=0.1), target)
  return overrides({**o, "train.steps": tc.steps, "train.warmup_steps": tc.warmup_steps})


# the test preset: a 2-layer model on a small planted language, 32 steps
# (checkpoints 0, 1, 2, 4, 8, 16, 24, 32; the tests compare steps 8, 16 and 32)
_TINY = overrides({"model.n_layers": 2, "model.n_heads": 2, "train.steps": 32,
                   "train.ckpt_every": 8, "train.batch_size": 8, "train.seq_len": 16,
                   "train.lr": 3e-3, "train.warmup_steps": 4, "data.source": "planted",
                   "data.options.vocab_size": 512, "data.options.vocab": 64,
                   "data.options.rank": 4,
                   "data.options.train_tokens": 50_000, "data.options.val_tokens": 4096})
_TINY_KNOBS = dict(n_sequences=16, all_sequences=4, group_size=8, chunk=16)

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: one width
    "test": Preset("tiny", _TINY, Knobs(widths=(16,), **_TINY_KNOBS)),
    # stabilisation by width with seeds (``Rule``): Shakespeare (--data=DIR; default the
    # packaged sample) at V 1024, d ∈ {32, 64, 128} x seeds {0, 1}, 4 layers; Pythia's recipe
    # by Γ 2.4 at η 1e-2 (4,368 steps of 8 x 64 tokens); checkpoints log-spaced 0..512 and
    # every 100 steps (a stabilisation fraction to ~2% of training)
    "cpu": Preset("tiny", gamma_overrides({"train.lr": 1e-2, "train.batch_size": 8,
                                           "train.ckpt_every": 100}, 2.4),
                  Knobs(widths=(32, 64, 128), seeds=(0, 1))),
    # `reproduce --quick`: three tiny widths on the planted language
    "quick": Preset("tiny", _TINY, Knobs(widths=(16, 32, 48), **_TINY_KNOBS)),
    # cpu at test size (seconds; the rule's test): 4 layers, 48 steps, a 64-piece tokenizer
    "test-cpu": Preset("tiny", overrides({
        "model.n_layers": 4, "model.n_heads": 2, "train.steps": 48, "train.ckpt_every": 16,
        "train.ckpt_log_spaced": False, "train.batch_size": 8, "train.seq_len": 16,
        "train.lr": 3e-3, "train.warmup_steps": 4, "data.options.vocab_size": 64}),
        Knobs(widths=(16, 32, 48), seeds=(0, 1), **_TINY_KNOBS)),
    # the paper's scale (Pythia-70m/160m/410m shapes); validated in tests, not run on CPU
    "tpu": Preset("tiny", overrides({"train.steps": 20000, "train.ckpt_every": 1000,
                                     "train.batch_size": 256, "train.seq_len": 2048,
                                     "train.lr": 1e-3, "train.warmup_steps": 200,
                                     "data.source": "tfds", "data.options.name": "lm1b",
                                     "data.options.vocab_size": 50304}),
                  Knobs(widths=(512, 768, 1024), grad_per=True,
                        per_width={"model.n_layers": (6, 12, 24), "model.n_heads": (8, 12, 16),
                                   "train.lr": (1e-3, 6e-4, 3e-4)},
                        all_sequences=8, group_size=2, chunk=8)),
}
