"""Presets of the convergence experiment: dotted Config overrides of the ``tiny`` base (model shape,
training with dense checkpoints, data source), the per-width overrides, and the measurement
knobs that are not Config fields (``ConvergenceSettings`` sizes)."""

from __future__ import annotations

import dataclasses
from sbjax.studies.presets import Preset, pick_preset
from sbjax.config import TrainConfig
from sbjax.optim import steps_for_gamma


@dataclasses.dataclass(frozen=True)
class Knobs:
  widths: tuple
  per_width: dict = dataclasses.field(default_factory=dict)  # override key -> one value per width
  n_sequences: int = 128  # the fixed batch (last-token CKA)
  all_sequences: int = 32  # sequences of the all-token CKA
  grad_per: bool = True  # PER of the gradients on the fixed batch
  group_size: int = 4  # checkpoints per compiled forward
  chunk: int = 32
  per_mlp_r: int = 0  # MLP PER over the top r singular values (0: all; head_dim: the authors')


# the cpu preset's model, training and data in dotted keys over ``tiny``; the other presets
# replace some of them (``overrides``). The planted language (data.planted_*) is the data of
# source=planted and of a text preset run without a corpus.
CPU = {"model.vocab_size": 0, "model.n_layers": 4, "model.n_heads": 4, "train.steps": 1000,
       "train.ckpt_every": 50, "train.batch_size": 32, "train.seq_len": 64, "train.lr": 2e-3,
       "train.warmup_steps": 50, "train.eval_batches": 2, "train.ckpt_log_spaced": True,
       "data.source": "text", "data.vocab_size": 1024, "data.tfds_name": "",
       "data.planted_vocab": 256, "data.planted_rank": 8, "data.planted_train_tokens": 400_000,
       "data.planted_val_tokens": 16_384}


def overrides(o: dict) -> dict:
  """CPU with the preset's dotted keys ``o`` over it, and the keys derived from them:
  model.max_len = train.seq_len, one eval at the end, 20 log lines. Checkpoints: log-spaced
  0, 1, 2, ..., 512 plus one every train.ckpt_every steps."""
  o = {**CPU, **o}
  steps = o["train.steps"]
  return {**o, "model.max_len": o["train.seq_len"], "train.eval_every": steps,
          "train.log_every": max(1, steps // 20)}


def gamma_overrides(o: dict, target: float) -> dict:
  """``overrides(o)`` trained for Γ = ``target`` by Pythia's recipe (λ = 0.1, 1% warm-up,
  cosine to 10%; ``sbjax.optim.steps_for_gamma``) at o's train.lr, with fresh tokens every
  step: train.steps, train.warmup_steps and data.planted_train_tokens follow from them."""
  o = {**CPU, **o}
  tc = steps_for_gamma(TrainConfig(lr=o["train.lr"], weight_decay=0.1), target)
  return overrides({**o, "train.steps": tc.steps, "train.warmup_steps": tc.warmup_steps,
                    "data.planted_train_tokens":
                        tc.steps * o["train.batch_size"] * o["train.seq_len"] + 1})


# the test and quick presets: a 2-layer model on a small planted language, 32 steps
# (checkpoints 0, 1, 2, 4, 8, 16, 24, 32; the tests compare steps 8, 16 and 32)
_TINY = overrides({"model.n_layers": 2, "model.n_heads": 2, "train.steps": 32,
                   "train.ckpt_every": 8, "train.batch_size": 8, "train.seq_len": 16,
                   "train.lr": 3e-3, "train.warmup_steps": 4, "data.source": "planted",
                   "data.vocab_size": 512, "data.planted_vocab": 64, "data.planted_rank": 4,
                   "data.planted_train_tokens": 50_000, "data.planted_val_tokens": 4096})
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
    # MLP PER with r = head_dim (the authors' convention). Session 10: 13 min 21 s on 2 quiet
    # cores with SBJAX_KEEP_HOST_MEMORY=1 (BUILD_NOTES "convergence")
    "cpu-gamma": Preset("tiny", gamma_overrides({"train.lr": 1e-2, "train.batch_size": 8,
                                                 "train.ckpt_every": 250,
                                                 "data.source": "planted_mix"}, target=7.9),
                        Knobs(widths=(16, 64), per_width={"model.n_heads": (2, 8)},
                              grad_per=False, all_sequences=32, per_mlp_r=8)),
    # the paper's scale (Pythia-70m/160m/410m shapes); validated in tests, not run on CPU
    "tpu": Preset("tiny", overrides({"train.steps": 20000, "train.ckpt_every": 1000,
                                     "train.batch_size": 256, "train.seq_len": 2048,
                                     "train.lr": 1e-3, "train.warmup_steps": 200,
                                     "data.source": "tfds", "data.tfds_name": "lm1b",
                                     "data.vocab_size": 50304}),
                  Knobs(widths=(512, 768, 1024),
                        per_width={"model.n_layers": (6, 12, 24), "model.n_heads": (8, 12, 16),
                                   "train.lr": (1e-3, 6e-4, 3e-4)},
                        all_sequences=8, group_size=2, chunk=8)),
}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "convergence")
