"""Presets of the collapse experiment: dotted overrides of the GPT-Neo-like family ``neo`` (every
architecture of the grid is the sbjax config ``neo-L<depth>-d<width>``; the ``data.*`` keys
choose the corpus) and the knobs that are not Config fields (the grid, the seed groups, token
budgets, permutations, the planted language of the ceiling)."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset


@dataclasses.dataclass(frozen=True)
class Knobs:
  depths: tuple
  widths: tuple
  epochs: tuple = (1, 3)  # snapshots (checkpoints measured) after these epochs
  weight_decays: tuple = (0.0, 0.1)  # one grid member per decay
  seeds: int = 8  # members (data-order and init seeds) of each seed-only group
  seed_arch: tuple = (2, 64)  # (L, d) of the first seed-only group
  extra_seed_archs: tuple = ()  # further (L, d) shapes, each its own seed-only group
  seed_weight_decay: float = 0.1
  epoch_tokens: int = 65_536  # an epoch: the first this many train tokens (0 = all)
  val_tokens: int = 16_384  # validation tokens measured (0 = all)
  chunk: int = 32  # windows per forward chunk of the collapse pass
  n_perm: int = 10_000  # permutations of the seed groups' p-values
  min_counts: tuple = (1, 20)  # the analysed classes: N_c >= min_count, each reported
  ceiling: tuple = ()  # (V, k) of the planted language of the collapse ceiling; () = none
  ceiling_arch: tuple = (1, 32)  # (L, d) trained on it (one member per weight decay)
  ceiling_steps: tuple = ()  # its checkpoints measured against the ceiling; () = table only
  ceiling_tokens: int = 65_536  # sampled training tokens (validation: 1/8 of it)


# every preset: constant learning rate after warm-up (min_lr_ratio=1: the 1-epoch model is the
# 3-epoch run's checkpoint, the model of a shorter run); the weight decay is per member (Knobs)
COMMON = {"train.min_lr_ratio": 1.0, "train.weight_decay": 0.0, "data.source": "text"}


def overrides(o: dict) -> dict:
  """COMMON with the preset's keys ``o`` over it, and model.max_len = max(train.seq_len, 8)."""
  o = {**COMMON, **o}
  return {"model.max_len": max(o["train.seq_len"], 8), **o}


GPU = {"data.source": "tokens", "data.options.vocab_size": 1024, "train.seq_len": 256,
       "train.batch_size": 32, "train.lr": 2e-3, "train.warmup_steps": 60}
GPU_KNOBS = {"epochs": (1, 3), "epoch_tokens": 0, "val_tokens": 0, "chunk": 16}
GPU_TEST = {"data.source": "tokens", "data.options.vocab_size": 64, "train.seq_len": 16,
            "train.batch_size": 8, "train.lr": 3e-3, "train.warmup_steps": 2}
GPU_TEST_KNOBS = {"epochs": (1, 3), "epoch_tokens": 1024, "val_tokens": 512, "chunk": 16,
                  "n_perm": 2000}

PRESETS: dict[str, Preset[Knobs]] = {
    # the suite: one architecture of 3 members, seed groups of 3 of L1-d8 and L1-d16, 8 steps
    # per epoch; the ceiling's language has the grid's V = 64 and trains 24 steps
    "test": Preset("neo", overrides({"data.options.vocab_size": 64, "train.seq_len": 16,
                                     "train.batch_size": 8, "train.lr": 3e-3,
                                     "train.warmup_steps": 2}),
                   Knobs(depths=(1,), widths=(8,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                         seed_arch=(1, 8), extra_seed_archs=((1, 16),), epoch_tokens=1024,
                         val_tokens=512, chunk=16, n_perm=2000, ceiling=(64, 7),
                         ceiling_arch=(1, 8), ceiling_steps=(8, 24), ceiling_tokens=2048)),
    "quick": Preset("neo", overrides({"data.options.vocab_size": 128, "train.seq_len": 32,
                                      "train.batch_size": 8, "train.lr": 3e-3,
                                      "train.warmup_steps": 5}),
                    Knobs(depths=(1, 2), widths=(16,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                          seed_arch=(1, 16), epoch_tokens=4096, val_tokens=2048,
                          ceiling=(64, 4), ceiling_arch=(1, 16), ceiling_steps=(25, 100, 400),
                          ceiling_tokens=32_768)),
    # Shakespeare at V = 256, an epoch of 262,144 tokens (512 steps of 8 x 64), checkpoints
    # after 1 and 3 epochs, constant lr 3e-3 after 100 warm-up steps (Γ = λ·Σ lr ≈ 0.45 at
    # λ = 0.1); grid L {1, 2} x d {32, 64, 128} x λ {0, 0.1} and 16 seeds of L1-d32 and L2-d64
    "cpu": Preset("neo", overrides({"data.options.vocab_size": 256, "train.seq_len": 64,
                                    "train.batch_size": 8, "train.lr": 3e-3,
                                    "train.warmup_steps": 100}),
                  Knobs(depths=(1, 2), widths=(32, 64, 128), epochs=(1, 3), seeds=16,
                        seed_arch=(1, 32), extra_seed_archs=((2, 64),), epoch_tokens=262_144,
                        val_tokens=32_768, ceiling=(256, 8), ceiling_arch=(1, 32),
                        ceiling_steps=(50, 100, 200, 400, 800, 1600), ceiling_tokens=262_144)),
    # the paper's grid (TinyStories, GPT-Neo tokenizer of 50257 ids) on token files:
    # --data=TRAIN.bin[,VAL.bin] (nothing is downloaded)
    "tpu": Preset("neo", overrides({"data.source": "tokens", "data.options.vocab_size": 50257,
                                   "train.seq_len": 512, "train.batch_size": 64,
                                   "train.lr": 1e-3, "train.warmup_steps": 500}),
                  Knobs(depths=(1, 2, 4, 8, 12), widths=(64, 128, 256, 512, 768, 1024),
                        seeds=16, seed_arch=(4, 256), epoch_tokens=0, val_tokens=1 << 22,
                        chunk=16)),
    # one GPU on the shipped Shakespeare token files (benchmarks/build_device_tokens.py, V =
    # 1024, ~249 steps per epoch): gpu, 24 seeds of L2-d256 (no grid); gpu-grid, L {1, 2, 4} x
    # d {64, 128, 256, 512} x λ {0, 0.1} (no seed group); and their test-size twins
    "gpu": Preset("neo", overrides(GPU), Knobs(depths=(), widths=(), seeds=24,
                                               seed_arch=(2, 256), **GPU_KNOBS)),
    "gpu-grid": Preset("neo", overrides(GPU), Knobs(depths=(1, 2, 4), widths=(64, 128, 256, 512),
                                                    seeds=0, **GPU_KNOBS)),
    "gpu-test": Preset("neo", overrides(GPU_TEST), Knobs(depths=(), widths=(), seeds=3,
                                                         seed_arch=(1, 8), **GPU_TEST_KNOBS)),
    "gpu-grid-test": Preset("neo", overrides(GPU_TEST),
                            Knobs(depths=(1,), widths=(8,), weight_decays=(0.0, 0.05, 0.1),
                                  seeds=0, **GPU_TEST_KNOBS)),
}
