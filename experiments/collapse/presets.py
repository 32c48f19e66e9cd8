"""Presets of the collapse experiment: dotted overrides of the GPT-Neo-like family ``neo`` (every
architecture of the grid is the sbjax config ``neo-L<depth>-d<width>``; the ``data.*`` keys
choose the corpus) and the knobs that are not Config fields (the grid, the seed groups, token
budgets, permutations, the planted language of the ceiling)."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset


@dataclasses.dataclass(frozen=True)
class Rule:
  """The constants of the pre-registered rule (``tables.decide``): the authors' sign of r
  against validation loss per metric and the min_counts whose intervals it reads. UNC3's +
  is from their released results table (R² 0.69); NC3's - and GNC2's + are the paper's
  trends (the better models are more self-dual and more uniform on the sphere)."""

  signs: tuple = (("nc3_cos_mean", -1), ("unc3_cos_cov", +1), ("gnc2_log_kernel_mean", +1))
  min_counts: tuple = (1, 20)


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
  rule: Rule | None = None  # the pre-registered decision (tables.decide: summary.json)


# every preset: constant learning rate after warm-up (min_lr_ratio=1: the 1-epoch model is the
# 3-epoch run's checkpoint, the model of a shorter run); the weight decay is per member (Knobs)
COMMON = {"train.min_lr_ratio": 1.0, "train.weight_decay": 0.0}


def overrides(vocab: int, seq_len: int, batch: int, lr: float, warmup: int,
              source: str = "text") -> dict:
  """COMMON with a preset's corpus, vocabulary and training over it (model.max_len =
  max(seq_len, 8))."""
  return {"model.max_len": max(seq_len, 8), **COMMON, "data.source": source,
          "data.options.vocab_size": vocab, "train.seq_len": seq_len, "train.batch_size": batch,
          "train.lr": lr, "train.warmup_steps": warmup}


GPU = overrides(1024, 256, 32, 2e-3, 60, source="tokens")
GPU_KNOBS = {"epochs": (1, 3), "epoch_tokens": 0, "val_tokens": 0, "chunk": 16}
GPU_TEST = overrides(64, 16, 8, 3e-3, 2, source="tokens")
GPU_TEST_KNOBS = {"epochs": (1, 3), "epoch_tokens": 1024, "val_tokens": 512, "chunk": 16,
                  "n_perm": 2000}

PRESETS: dict[str, Preset[Knobs]] = {
    # the suite: one architecture of 3 members, seed groups of 3 of L1-d8 and L1-d16, 8 steps
    # per epoch; the ceiling's language has the grid's V = 64 and trains 24 steps
    "test": Preset("neo", overrides(64, 16, 8, 3e-3, 2),
                   Knobs(depths=(1,), widths=(8,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                         seed_arch=(1, 8), extra_seed_archs=((1, 16),), epoch_tokens=1024,
                         val_tokens=512, chunk=16, n_perm=2000, ceiling=(64, 7),
                         ceiling_arch=(1, 8), ceiling_steps=(12, 24), ceiling_tokens=2048)),
    "quick": Preset("neo", overrides(128, 32, 8, 3e-3, 5),
                    Knobs(depths=(1, 2), widths=(16,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                          seed_arch=(1, 16), epoch_tokens=4096, val_tokens=2048,
                          ceiling=(64, 4), ceiling_arch=(1, 16), ceiling_steps=(25, 100, 400),
                          ceiling_tokens=32_768)),
    # Shakespeare at V = 256, an epoch of 262,144 tokens (512 steps of 8 x 64), checkpoints
    # after 1 and 3 epochs, constant lr 3e-3 after 100 warm-up steps (Γ = λ·Σ lr ≈ 0.45 at
    # λ = 0.1); grid L {1, 2} x d {32, 64, 128} x λ {0, 0.1} and 16 seeds of L1-d32 and L2-d64
    "cpu": Preset("neo", overrides(256, 64, 8, 3e-3, 100),
                  Knobs(depths=(1, 2), widths=(32, 64, 128), epochs=(1, 3), seeds=16,
                        seed_arch=(1, 32), extra_seed_archs=((2, 64),), epoch_tokens=262_144,
                        val_tokens=32_768, ceiling=(256, 8), ceiling_arch=(1, 32),
                        ceiling_steps=(50, 100, 200, 400, 800, 1600), ceiling_tokens=262_144)),
    # many classes per dimension: the cpu grid at V = 1024 (C/d 8-32), snapshots after 1 and 4
    # epochs (2048 steps), no seed group or ceiling; the rule pre-registered; test-e2: the same
    # design at test's V = 64, λ and epochs, d {8, 16}: its L1-d8 reuses test's built programs
    "cpu-e2": Preset("neo", overrides(1024, 64, 8, 3e-3, 100),
                     Knobs(depths=(1, 2), widths=(32, 64, 128), epochs=(1, 4), seeds=0,
                           epoch_tokens=262_144, val_tokens=32_768, rule=Rule())),
    "test-e2": Preset("neo", overrides(64, 16, 8, 3e-3, 2),
                      Knobs(depths=(1,), widths=(8, 16), weight_decays=(0.0, 0.05, 0.1), seeds=0,
                            epoch_tokens=1024, val_tokens=512, chunk=16, rule=Rule())),
    # the paper's grid (TinyStories, GPT-Neo tokenizer of 50257 ids) on token files:
    # --data=TRAIN.bin[,VAL.bin] (nothing is downloaded)
    "tpu": Preset("neo", overrides(50257, 512, 64, 1e-3, 500, source="tokens"),
                  Knobs(depths=(1, 2, 4, 8, 12), widths=(64, 128, 256, 512, 768, 1024),
                        seeds=16, seed_arch=(4, 256), epoch_tokens=0, val_tokens=1 << 22,
                        chunk=16)),
    # one GPU on the shipped Shakespeare token files (benchmarks/build_device_tokens.py, V =
    # 1024, ~249 steps per epoch): gpu, 24 seeds of L2-d256 (no grid); gpu-grid, L {1, 2, 4} x
    # d {64, 128, 256, 512} x λ {0, 0.1} (no seed group); and their test-size twins
    "gpu": Preset("neo", GPU, Knobs(depths=(), widths=(), seeds=24, seed_arch=(2, 256),
                                    **GPU_KNOBS)),
    "gpu-grid": Preset("neo", GPU, Knobs(depths=(1, 2, 4), widths=(64, 128, 256, 512), seeds=0,
                                         **GPU_KNOBS)),
    "gpu-test": Preset("neo", GPU_TEST, Knobs(depths=(), widths=(), seeds=3, seed_arch=(1, 8),
                                              **GPU_TEST_KNOBS)),
    "gpu-grid-test": Preset("neo", GPU_TEST, Knobs(depths=(1,), widths=(8,),
                                                   weight_decays=(0.0, 0.05, 0.1), seeds=0,
                                                   **GPU_TEST_KNOBS)),
}
