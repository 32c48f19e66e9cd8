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
  """Pre-registered before the cpu-e4 run (``stats.decide``). Primary cell: level ``level``,
  probe batch ``probe``; a run's number there is the median over its layers (MLP and OV;
  last-token, biased CKA) of the fraction of training after which the layer's CKA to the final
  checkpoint stays ≥ the level. Spearman ρ(width, that number) over the runs, two-sided exact
  permutation p (every pairing): "larger models stabilise earlier" is supported if ρ < 0 and
  p < ``alpha``, refuted if ρ > 0 and p < alpha, else undecided at this size. The other levels
  and probes are reported and decide nothing."""

  level: float = 0.9
  probe: int = 0
  alpha: float = 0.05


@dataclasses.dataclass(frozen=True)
class Knobs:
  widths: tuple
  seeds: tuple = ()  # train.seed of a width's runs (none: one run at the config's seed)
  rule: Rule | None = None  # the decision summary.json carries
  per_width: dict = dataclasses.field(default_factory=dict)  # override key -> one value per width
  n_sequences: int = 128  # the fixed batch (last-token CKA)
  all_sequences: int = 32  # sequences of the all-token CKA (0: all n_sequences)
  grad_per: bool = True  # PER of the gradients on the fixed batch
  group_size: int = 4  # checkpoints per compiled forward
  chunk: int = 32  # sequences per forward call
  per_mlp_r: int = 0  # MLP PER over the top r singular values (0: all; head_dim: the authors')
  # disjoint probe batches of n_sequences (the next validation windows; beyond the first,
  # last-token biased CKA only; stab_levels.csv), so a step that moves with the batch shows
  probe_batches: int = 2


# the cpu preset's model, training and data (text and planted options) in dotted keys over
# ``tiny``; the other presets replace some of them (``overrides``)
CPU = {"model.vocab_size": 0, "model.n_layers": 4, "model.n_heads": 4, "train.steps": 1000,
       "train.ckpt_every": 50, "train.batch_size": 32, "train.seq_len": 64, "train.lr": 2e-3,
       "train.warmup_steps": 50, "train.eval_batches": 2, "train.ckpt_log_spaced": True,
       "data.source": "text", "data.options.vocab_size": 1024,
       "data.options.vocab": 256, "data.options.rank": 8, "data.options.train_tokens": 400_000,
       "data.options.val_tokens": 16_384}


def overrides(o: dict) -> dict:
  """CPU with the preset's dotted keys ``o`` over it, and the keys derived from them:
  model.max_len = train.seq_len, one eval at the end, 20 log lines. Checkpoints: log-spaced
  0, 1, 2, ..., 512 plus one every train.ckpt_every steps."""
  o = {**CPU, **o}
  return {**o, "model.max_len": o["train.seq_len"], "train.eval_every": o["train.steps"],
          "train.log_every": max(1, o["train.steps"] // 20)}


def gamma_overrides(o: dict, target: float) -> dict:
  """``overrides(o)`` trained for Γ = ``target`` by Pythia's recipe (λ = 0.1, 1% warm-up,
  cosine to 10%; ``sbjax.optim.steps_for_gamma``) at o's train.lr, with fresh tokens every
  step: train.steps, train.warmup_steps and data.options.train_tokens follow from them."""
  o = {**CPU, **o}
  tc = steps_for_gamma(TrainConfig(lr=o["train.lr"], weight_decay=0.1), target)
  return overrides({**o, "train.steps": tc.steps, "train.warmup_steps": tc.warmup_steps,
                    "data.options.train_tokens":
                        tc.steps * o["train.batch_size"] * o["train.seq_len"] + 1})


# the test and quick presets: a 2-layer model on a small planted language, 32 steps
# (checkpoints 0, 1, 2, 4, 8, 16, 24, 32; the tests compare steps 8, 16 and 32)
_TINY = overrides({"model.n_layers": 2, "model.n_heads": 2, "train.steps": 32,
                   "train.ckpt_every": 8, "train.batch_size": 8, "train.seq_len": 16,
                   "train.lr": 3e-3, "train.warmup_steps": 4, "data.source": "planted",
                   "data.options.vocab_size": 512, "data.options.vocab": 64,
                   "data.options.rank": 4,
                   "data.options.train_tokens": 50_000, "data.options.val_tokens": 4096})
_TINY_KNOBS = dict(n_sequences=16, all_sequences=4, grad_per=False, group_size=8, chunk=16)

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: one width
    "test": Preset("tiny", _TINY, Knobs(widths=(16,), **_TINY_KNOBS)),
    # `reproduce --quick`: three tiny widths on the planted language
    "quick": Preset("tiny", _TINY, Knobs(widths=(16, 32, 48), **_TINY_KNOBS)),
    # <= 30 min on 2 cores: three widths, 4 layers, 1000 steps, 31 checkpoints each
    "cpu": Preset("tiny", overrides({}), Knobs(widths=(32, 64, 128))),
    # Γ like Pythia-14m/70m (7.9 weight-decay timescales: 14,377 steps at η = 1e-2, 8 x 64
    # tokens, fresh every step) on the planted mixture: 4 layers, d ∈ {16, 64}, head_dim 8,
    # MLP PER with r = head_dim (the authors' convention). 13 min 21 s on 2 quiet
    # cores with SBJAX_KEEP_HOST_MEMORY=1
    "cpu-gamma": Preset("tiny", gamma_overrides({"train.lr": 1e-2, "train.batch_size": 8,
                                                 "train.ckpt_every": 250,
                                                 "data.source": "planted_mix"}, target=7.9),
                        Knobs(widths=(16, 64), per_width={"model.n_heads": (2, 8)},
                              grad_per=False, all_sequences=32, per_mlp_r=8)),
    # the paper's scale (Pythia-70m/160m/410m shapes); validated in tests, not run on CPU
    "tpu": Preset("tiny", overrides({"train.steps": 20000, "train.ckpt_every": 1000,
                                     "train.batch_size": 256, "train.seq_len": 2048,
                                     "train.lr": 1e-3, "train.warmup_steps": 200,
                                     "data.source": "tfds", "data.options.name": "lm1b",
                                     "data.options.vocab_size": 50304}),
                  Knobs(widths=(512, 768, 1024),
                        per_width={"model.n_layers": (6, 12, 24), "model.n_heads": (8, 12, 16),
                                   "train.lr": (1e-3, 6e-4, 3e-4)},
                        all_sequences=8, group_size=2, chunk=8)),
}


# Stabilisation where depth matters: CPU's 4 layers (4 heads), Pythia's recipe by Γ at η 1e-2
# (cpu-gamma's), 8 x 64 tokens a step (Γ 2.4: 4,368 steps; 7.9: 14,377): the CPU budget is met
# by small batches and models, not by fewer steps. Checkpoints: log-spaced 0..512 plus every
# 100 steps (every 250 at Γ 7.9), so a stabilisation fraction is resolved to ~2% of training.
_DEPTH = {"train.lr": 1e-2, "train.batch_size": 8, "train.ckpt_every": 100}
# (b) a planted language of context 2: V = 64, 4096 contexts, each with its own random rank-8
# logit vector (attention must move the previous token, the MLPs combine the pair); 32,768
# validation tokens hold the two probe batches (2 x 128 windows of 65)
_CTX2 = {**_DEPTH, "data.source": "planted", "data.options.vocab": 64, "data.options.rank": 8,
         "data.options.context": 2, "data.options.val_tokens": 32_768}
_DEPTH_KNOBS = dict(grad_per=False, all_sequences=32, probe_batches=2)
_DEPTH_TEXT = gamma_overrides(_DEPTH, target=2.4)  # on CPU's text source at V 1024
PRESETS.update({
    # (a) Shakespeare (--data=DIR; default the packaged sample), V = 1024, d in {32, 128}, Γ 2.4
    "depth-text": Preset("tiny", _DEPTH_TEXT, Knobs(widths=(32, 128), **_DEPTH_KNOBS)),
    # stabilisation by width (``Rule``): depth-text at d in {32, 64, 128} x seeds {0, 1}
    "cpu-e4": Preset("tiny", _DEPTH_TEXT, Knobs(widths=(32, 64, 128), seeds=(0, 1), rule=Rule(),
                                                **_DEPTH_KNOBS)),
    # (b) the context-2 planted language at the larger Pythias' Γ (2.4) and the small ones' (7.9)
    "depth-planted-g2.4": Preset("tiny", gamma_overrides(_CTX2, target=2.4),
                                 Knobs(widths=(32,), **_DEPTH_KNOBS)),
    "depth-planted-g7.9": Preset("tiny", gamma_overrides({**_CTX2, "train.ckpt_every": 250},
                                                         target=7.9),
                                 Knobs(widths=(32,), **_DEPTH_KNOBS)),
    # cpu-e4 at test size (seconds): 2 layers, 32 steps, a 64-piece tokenizer, checkpoints 0, 20,
    # 32; test's shapes (its d16 programs serve d16s0 and d16s1)
    "test-e4": Preset("tiny", overrides({
        "model.n_layers": 2, "model.n_heads": 2, "train.steps": 32, "train.ckpt_every": 20,
        "train.ckpt_log_spaced": False, "train.batch_size": 8, "train.seq_len": 16,
        "train.lr": 3e-3, "train.warmup_steps": 4, "data.options.vocab_size": 64}),
        Knobs(widths=(16, 32, 48), seeds=(0, 1), rule=Rule(), **_TINY_KNOBS)),
})
