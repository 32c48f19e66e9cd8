"""Presets of the collapse experiment: dotted Config overrides of the GPT-Neo-like family ``neo``
(every architecture of the grid is the sbjax preset ``neo-L<depth>-d<width>``) and the knobs
that are not Config fields (the grid, the seed group, token budgets, permutations)."""

from __future__ import annotations

import dataclasses
from sbjax.studies.presets import Preset, pick_preset


@dataclasses.dataclass(frozen=True)
class Knobs:
  depths: tuple
  widths: tuple
  epochs: tuple = (1, 3)
  weight_decays: tuple = (0.0, 0.1)
  seeds: int = 8  # seed-only group size
  seed_arch: tuple = (2, 64)  # (L, d) of the seed-only group
  # further (L, d) shapes of the seed-only test, each its own group of ``seeds`` data-order
  # seeds (issue 33 item 4: the per-shape test for two shapes); () = one shape
  extra_seed_archs: tuple = ()
  seed_weight_decay: float = 0.1
  epoch_tokens: int = 65_536  # 0 = the whole training split
  val_tokens: int = 16_384  # 0 = the whole validation split
  chunk: int = 32  # windows per forward chunk of the collapse pass
  n_perm: int = 10_000  # permutations of the seed group's p-values
  min_counts: tuple = (1, 20)  # the analysed classes: N_c >= min_count, each reported
  ceiling: tuple = ()  # (V, k) of the planted language of the collapse ceiling; () = none
  ceiling_arch: tuple = (1, 32)  # (L, d) trained on it (one member per weight decay)
  ceiling_steps: tuple = ()  # snapshot steps measured against the ceiling; () = table only
  ceiling_tokens: int = 65_536  # sampled training tokens (validation: 1/8 of it)
  budget_s: float = 0.0  # stop cleanly before a group that would end past this (0 = none)
  estimate_at: int = 200  # steps timed (after a 10-step warm-up) for the time estimate


# every preset's training: constant learning rate after warm-up (min_lr_ratio=1: the 1-epoch
# model is the 3-epoch run's snapshot); the weight decay is per member (Knobs), so the
# Config's is 0. A preset gives the rest in dotted keys (``overrides``).
COMMON = {"train.min_lr_ratio": 1.0, "train.weight_decay": 0.0, "data.source": "text"}


def overrides(o: dict) -> dict:
  """COMMON with the preset's dotted keys ``o`` over it, and model.max_len =
  max(train.seq_len, 8)."""
  o = {**COMMON, **o}
  return {"model.max_len": max(o["train.seq_len"], 8), **o}


GPU = {"data.source": "tokens", "data.options.vocab_size": 1024, "train.seq_len": 256,
       "train.batch_size": 32, "train.lr": 2e-3, "train.warmup_steps": 60}
GPU_KNOBS = dict(epochs=(1, 3), epoch_tokens=0, val_tokens=0, chunk=16, budget_s=450.0)
GPU_TEST = {"data.source": "tokens", "data.options.vocab_size": 64, "train.seq_len": 16,
            "train.batch_size": 8, "train.lr": 3e-3, "train.warmup_steps": 2}
GPU_TEST_KNOBS = dict(epochs=(1, 3), epoch_tokens=1024, val_tokens=512, chunk=16, n_perm=2000,
                      budget_s=300.0, estimate_at=4)

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: one architecture of 3 members and a seed
    # group of 3 of the same shape (one compiled step), a second seed shape L1-d16 (the
    # per-shape seed test for two shapes; one more compile), 8 steps per epoch; the ceiling's
    # language has the grid's V=64 and width k+1 = 8 and trains 24 steps (the grid's run
    # length), so it reuses the grid's compiled step and forward
    "test": Preset("neo", overrides({"data.options.vocab_size": 64, "train.seq_len": 16,
                                     "train.batch_size": 8, "train.lr": 3e-3,
                                     "train.warmup_steps": 2}),
                   Knobs(depths=(1,), widths=(8,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                         seed_arch=(1, 8), extra_seed_archs=((1, 16),), epoch_tokens=1024,
                         val_tokens=512, chunk=16,
                         n_perm=2000, ceiling=(64, 7), ceiling_arch=(1, 8),
                         ceiling_steps=(8, 24), ceiling_tokens=2048)),
    # quick: 3 weight decays and 3 seeds, so the seed group (M=3, L1-d16) reuses the
    # compiled step of the L1-d16 grid group.
    "quick": Preset("neo", overrides({"data.options.vocab_size": 128, "train.seq_len": 32,
                                      "train.batch_size": 8, "train.lr": 3e-3,
                                      "train.warmup_steps": 5}),
                    Knobs(depths=(1, 2), widths=(16,), weight_decays=(0.0, 0.05, 0.1), seeds=3,
                          seed_arch=(1, 16), epoch_tokens=4096, val_tokens=2048,
                          ceiling=(64, 4), ceiling_arch=(1, 16), ceiling_steps=(25, 100, 400),
                          ceiling_tokens=32_768)),
    # cpu (issue 19, item 2): Shakespeare at V=256, an epoch of 262,144 tokens (512 steps of
    # 8 x 64), snapshots after 1 and 3 epochs (1536 steps), constant LR 3e-3 after 100
    # warm-up steps, so Γ = λ·Σ lr ≈ 0.45 at λ=0.1 (the old preset: 0.04; collapse_meta.json:
    # weight_decay). Grid L ∈ {1, 2} × d ∈ {32, 64, 128} × λ ∈ {0, 0.1} (12 runs) and 16
    # data-order seeds of L1-d32 for the permutation test; min_count 1 and 20. Training cost
    # is per token (measured ≈ 17 µs CPU per token per L1-d32 member at batch 16 and 32
    # alike), so the 6 epochs of 524k tokens (≈ 50 CPU-min) are cut 4x in tokens,
    # keeping the step count and Γ of 3 epochs at batch 16. Issue 33 item 4: a second shape of
    # 16 seeds, L2-d64 (the grid's middle: other depth and width than L1-d32; measured under
    # load ≈ 350 s CPU for its 16 × 1536 steps, against ≈ 1030 s for L2-d128, the grid's
    # largest, which would not fit the session's CPU budget beside the rest).
    "cpu": Preset("neo", overrides({"data.options.vocab_size": 256, "train.seq_len": 64,
                                    "train.batch_size": 8, "train.lr": 3e-3,
                                    "train.warmup_steps": 100}),
                  Knobs(depths=(1, 2), widths=(32, 64, 128), epochs=(1, 3), seeds=16,
                        seed_arch=(1, 32), extra_seed_archs=((2, 64),), epoch_tokens=262_144,
                        val_tokens=32_768,
                        ceiling=(256, 8), ceiling_arch=(1, 32),
                        ceiling_steps=(50, 100, 200, 400, 800, 1600),
                        ceiling_tokens=262_144)),
    # The paper's grid (230 TinyStories models; GPT-Neo tokenizer size 50257): trains on
    # token files, --data=TRAIN.bin[,VAL.bin] of TinyStories ids (nothing is downloaded).
    "tpu": Preset("neo", overrides({"data.source": "tokens", "data.options.vocab_size": 50257,
                                   "train.seq_len": 512, "train.batch_size": 64,
                                   "train.lr": 1e-3, "train.warmup_steps": 500}),
                  Knobs(depths=(1, 2, 4, 8, 12), widths=(64, 128, 256, 512, 768, 1024),
                        seeds=16, seed_arch=(4, 256), epoch_tokens=0, val_tokens=1 << 22,
                        chunk=16)),
    # issue 32, item 3 (one H200, <= 8 min each): shipped token files of the Shakespeare
    # corpus (benchmarks/build_device_tokens.py; --data=device_tokens/V1024/train.uint16.bin,
    # device_tokens/V1024/val.uint16.bin), V = 1024, ~2.0M train tokens, windows of 256,
    # batch 32 (~249 steps per epoch), 3 epochs, snapshots after 1 and 3. gpu: 24 data-order
    # seeds of L2-d256 as one population (the permutation test's power; no grid); gpu-grid:
    # L in {1, 2, 4} x d in {64, 128, 256, 512} x λ in {0, 0.1} (24 runs, no seed group).
    "gpu": Preset("neo", overrides(GPU), Knobs(depths=(), widths=(), seeds=24,
                                               seed_arch=(2, 256), **GPU_KNOBS)),
    "gpu-grid": Preset("neo", overrides(GPU), Knobs(depths=(1, 2, 4), widths=(64, 128, 256, 512),
                                                    seeds=0, **GPU_KNOBS)),
    # their test-size twins (the suite, device_science.sh --dry-run): the same structure on
    # token files at V = 64 and the test preset's shapes (L1-d8, 3 members: its compiled step)
    "gpu-test": Preset("neo", overrides(GPU_TEST), Knobs(depths=(), widths=(), seeds=3,
                                                         seed_arch=(1, 8), **GPU_TEST_KNOBS)),
    "gpu-grid-test": Preset("neo", overrides(GPU_TEST),
                            Knobs(depths=(1,), widths=(8,), weight_decays=(0.0, 0.05, 0.1),
                                  seeds=0, **GPU_TEST_KNOBS)),
}


def seed_shapes(k: Knobs) -> tuple:
  """Every (L, d) of the seed-only test: ``seed_arch``, then ``extra_seed_archs``."""
  return (tuple(k.seed_arch),) + tuple(tuple(a) for a in k.extra_seed_archs)


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "collapse")
