"""The planted preset family of the saturation experiment (``--preset=<name>-planted``):
arms of width d and weight decay λ on the planted mixture language, run by Γ = λ Σ η.

An arm is (d, λ). Every arm of a preset trains for the same number of steps, chosen by
``sbjax.optim.steps_for_gamma`` so that the reference arms (λ = ``ref_weight_decay``) reach
``target_gamma``; an arm with another λ then reaches Γ_total = λ / λ_ref · target (e.g.
λ = 0.03: Γ ≈ 2.4, like Pythia-410m). Fresh tokens every step: the train stream holds
exactly steps · batch windows, so no window repeats and nothing can be over-fitted.
"""

from __future__ import annotations

import dataclasses

from ..shared import config_from, pick_preset
from sbjax import optim
from sbjax.config import Config, TrainConfig


@dataclasses.dataclass(frozen=True)
class Arm:
  d: int  # model width = head rank bound
  weight_decay: float  # λ
  dtype: str = "float32"  # compute dtype (model.dtype); softmax and loss stay float32

  @property
  def name(self) -> str:
    return arm_name(self.d, self.weight_decay, self.dtype)


def arm_name(d: int, weight_decay: float, dtype: str = "float32") -> str:
  """d<d>-wd<λ>, with a -bf16 / -fp16 suffix for a reduced-precision arm."""
  suffix = {"float32": "", "bfloat16": "-bf16", "float16": "-fp16"}.get(dtype, f"-{dtype}")
  return f"d{d}-wd{weight_decay:g}{suffix}"


@dataclasses.dataclass(frozen=True)
class PlantedPreset:
  arms: tuple
  target_gamma: float = 7.9  # Γ_total of the reference arms (Pythia-14m/70m)
  ref_weight_decay: float = 0.1
  steps: int = 0  # > 0: this many steps instead of the Γ target (the test preset)
  lr: float = 1e-2
  warmup_frac: float = 0.01
  batch: int = 8
  seq_len: int = 64
  n_layers: int = 1
  head_dim: int = 8  # heads = max(1, d // head_dim)
  ckpt_every: int = 250  # besides the log-spaced 0, 1, 2, 4, ..., 512
  log_every: int = 25
  streaming: bool = False  # train batches sampled on demand (data.planted_train_tokens = 0)
  # the planted mixture language
  vocab: int = 256
  rank: int = 8
  n_mix: int = 4
  alpha: float = 4.0
  lang_seed: int = 0
  # the fixed validation stream: windows of seq_len + 1 tokens (the bootstrap units)
  val_windows: int = 64
  # readout
  threshold: float = 0.02  # nats above the running minimum
  after: float = 0.3  # rises count after this fraction of training
  n_boot: int = 2000
  kl_jump: float = 1.0  # nats, within ±1 checkpoint of the rise onset
  anisotropy_level: float = 0.9
  floor_gtol: float = 1e-6
  floor_max_iter: int = 5000

  def train_steps(self) -> int:
    if self.steps:
      return self.steps
    ref = optim.steps_for_gamma(TrainConfig(lr=self.lr, weight_decay=self.ref_weight_decay),
                                self.target_gamma, self.warmup_frac)
    return ref.steps


def arm_config(p: PlantedPreset, arm: Arm) -> Config:
  """The validated Config of one arm (the ``planted`` base with the preset's overrides)."""
  steps = p.train_steps()
  return config_from("planted", {
      "model.vocab_size": p.vocab, "model.d_model": arm.d, "model.n_layers": p.n_layers,
      "model.n_heads": max(1, arm.d // p.head_dim), "model.max_len": p.seq_len,
      "model.dtype": arm.dtype,
      "data.source": "planted_mix", "data.planted_vocab": p.vocab, "data.planted_rank": p.rank,
      "data.planted_mix": p.n_mix, "data.planted_alpha": p.alpha, "data.planted_context": 1,
      "data.planted_seed": p.lang_seed,
      "data.planted_train_tokens": 0 if p.streaming else steps * p.batch * p.seq_len + 1,
      "data.planted_val_tokens": max(p.val_windows, p.batch) * p.seq_len + 1,
      "train.steps": steps, "train.batch_size": p.batch, "train.seq_len": p.seq_len,
      "train.lr": p.lr, "train.warmup_steps": int(round(p.warmup_frac * steps)),
      "train.min_lr_ratio": 0.1, "train.weight_decay": arm.weight_decay,
      "train.b1": 0.9, "train.b2": 0.95, "train.clip": 1.0,
      "train.eval_every": steps, "train.eval_batches": 1, "train.log_every": p.log_every,
      "train.ckpt_every": p.ckpt_every, "train.ckpt_log_spaced": True,
      "name": f"saturation-planted-{arm.name}"})


# Pythia's arms: d ∈ {8, 16, 64} at Γ ≈ 7.9; d = 8 at λ = 0.03 (Γ ≈ 2.4, Pythia-410m); d = 64
# at the same λ = 0.03, so that width and Γ are decoupled.
PYTHIA_ARMS = (Arm(8, 0.1), Arm(16, 0.1), Arm(64, 0.1), Arm(8, 0.03), Arm(64, 0.03))
# ... and d = 8 at Γ ≈ 7.9 computed in bfloat16 (Pythia trained in fp16; parameters, softmax
# and loss stay float32): the precision arm
BF16_ARM = Arm(8, 0.1, "bfloat16")

PLANTED_PRESETS: dict[str, PlantedPreset] = {
    # the e2e test: a tiny language, one arm (each arm costs ~15 s of compilation on CPU;
    # the multi-arm readout is unit-tested), 20 steps
    "test-planted": PlantedPreset(arms=(Arm(8, 0.03),), steps=20, batch=4,
                                  seq_len=16, ckpt_every=10, log_every=2, vocab=32, rank=2,
                                  n_mix=2, val_windows=8, n_boot=200, floor_gtol=1e-4,
                                  floor_max_iter=300),
    # 2 CPU cores: the recipe (η = 1e-2, λ = 0.1, 1% warm-up, cosine to 10%, Γ = 7.9
    # in 14,377 steps) at 8 x 64 tokens per step (7.4M fresh tokens per arm), one layer.
    # Time (BUILD_NOTES): the five float32 arms took 832 s user + 57 s system CPU in session 7
    # (67 min wall under heavy contention; quiet wall not measured); the bf16 arm is new and
    # not yet timed at this scale.
    # Floors: gtol 1e-4 / 1000 L-BFGS iterations reproduce the guide's floor(d) − H (8: 0.624,
    # 16: 0.236, 64: 0.0068 nats) in ~2 min on the loaded machine (cached in OUT).
    "cpu-planted": PlantedPreset(arms=PYTHIA_ARMS + (BF16_ARM,), floor_gtol=1e-4,
                                 floor_max_iter=1000),
    # Pythia-14m's learning rate (1e-3) and step count for Γ = 7.9 (143,770 steps, Pythia:
    # 143,000) at 32 x 64 tokens per step (294M fresh tokens per arm, sampled on demand:
    # sbjax.data.planted_stream), 2 layers; not run yet
    "tpu-planted": PlantedPreset(arms=PYTHIA_ARMS + (BF16_ARM,), lr=1e-3, batch=32, n_layers=2,
                                 ckpt_every=1000, log_every=100, val_windows=256,
                                 streaming=True),
}


def get_planted_preset(name) -> PlantedPreset:
  return pick_preset(PLANTED_PRESETS, name, "saturation (planted)")
