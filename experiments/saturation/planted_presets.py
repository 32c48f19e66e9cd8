"""Presets of the planted arms (``saturation_planted``): arms of width d and weight decay λ on a
planted mixture language, run by Γ = λ Σ η. Every arm of a preset trains for the same number of
steps, chosen by ``sbjax.optim.steps_for_gamma`` so that the reference arms (λ =
``ref_weight_decay``) reach ``target_gamma``; an arm with another λ reaches λ / λ_ref · target.
Fresh tokens every step: the train stream holds exactly steps · batch windows."""

from __future__ import annotations

import dataclasses

from sbjax import optim
from sbjax.config import Config, TrainConfig
from sbjax.experiment import Preset
from sbjax.overrides import config_from

from .rise_rule import RiseRule


@dataclasses.dataclass(frozen=True)
class Arm:
  d: int  # model width = head rank bound
  weight_decay: float  # λ
  dtype: str = "float32"  # compute dtype (model.dtype); softmax and loss stay float32
  seed: int = 0  # train.seed = train.data_seed (the language and its windows stay fixed)
  lang: tuple = ()  # the arm's own language: ((data.options.* key, value), ...)

  @property
  def name(self) -> str:
    return arm_name(self.d, self.weight_decay, self.dtype, self.seed, self.lang)


def lang_tag(lang: tuple) -> str:
  """"" for the preset's language, else -<option><value>... (e.g. -vocab1024-zipf1.5)."""
  return "".join(f"-{k.removeprefix('data.options.')}{v:g}" for k, v in lang)


def arm_name(d: int, weight_decay: float, dtype: str = "float32", seed: int = 0,
             lang: tuple = ()) -> str:
  """d<d>-wd<λ>[-bf16|-fp16][<lang_tag>][-s<seed> for seed > 0]."""
  suffix = {"float32": "", "bfloat16": "-bf16", "float16": "-fp16"}.get(dtype, f"-{dtype}")
  return f"d{d}-wd{weight_decay:g}{suffix}{lang_tag(lang)}" + (f"-s{seed}" if seed else "")


@dataclasses.dataclass(frozen=True)
class Knobs:
  arms: tuple
  target_gamma: float = 7.9  # Γ_total of the reference arms (Pythia-14m/70m)
  ref_weight_decay: float = 0.1
  warmup_frac: float = 0.01  # train.warmup_steps = round(warmup_frac · train.steps)
  head_dim: int = 8  # model.n_heads = max(1, d // head_dim)
  streaming: bool = False  # train batches sampled on demand (data.options.train_tokens = 0)
  val_windows: int = 64  # the fixed validation windows (seq_len + 1 tokens; bootstrap units)
  threshold: float = 0.02  # the rise: nats above the running minimum
  after: float = 0.3  # rises count after this fraction of training
  n_boot: int = 2000
  floor_gtol: float = 1e-6
  floor_max_iter: int = 5000
  floor_mode: str = "fit"  # "svd": an upper bound (planted_measure.svd_bounds), for large V
  population: bool = False  # the arms of one shape (d, dtype, language) train as one run
  rule: RiseRule = RiseRule()  # the rise's null level and the width-order verdict (rise_rule)


CPU = {"data.source": "planted_mix", "data.options.vocab": 256, "data.options.rank": 8,
       "data.options.mix": 4, "data.options.alpha": 4.0, "data.options.context": 1,
       "data.options.seed": 0, "model.n_layers": 1, "train.steps": 0, "train.batch_size": 8,
       "train.seq_len": 64, "train.lr": 1e-2, "train.min_lr_ratio": 0.1, "train.b1": 0.9,
       "train.b2": 0.95, "train.clip": 1.0, "train.eval_batches": 1, "train.log_every": 25,
       "train.ckpt_every": 250, "train.ckpt_log_spaced": True}


def overrides(o: dict, k: Knobs) -> dict:
  """CPU with the preset's keys ``o`` over it, and the keys derived from them: train.steps (the
  Γ target when 0), the warm-up, fresh tokens every step, the validation stream, one eval at
  the end, model.vocab_size = data.options.vocab, model.max_len = train.seq_len."""
  o = {**CPU, **o}
  steps = o["train.steps"] or optim.steps_for_gamma(
      TrainConfig(lr=o["train.lr"], weight_decay=k.ref_weight_decay), k.target_gamma,
      k.warmup_frac).steps
  batch, seq_len = o["train.batch_size"], o["train.seq_len"]
  return {**o, "model.vocab_size": o["data.options.vocab"], "model.max_len": seq_len,
          "train.steps": steps, "train.warmup_steps": int(round(k.warmup_frac * steps)),
          "train.eval_every": steps,
          "data.options.train_tokens": 0 if k.streaming else steps * batch * seq_len + 1,
          "data.options.val_tokens": max(k.val_windows, batch) * seq_len + 1}


def preset(o: dict, k: Knobs) -> Preset:
  return Preset("planted", overrides(o, k), k)


def arm_config(p: Preset, arm: Arm) -> Config:
  """The Config of one arm: the preset's overrides, the arm's language and its width, heads,
  dtype, weight decay and seeds."""
  o = {**p.overrides, **dict(arm.lang)}
  return config_from(p.base, {
      **o, "model.vocab_size": o["data.options.vocab"], "model.d_model": arm.d,
      "model.n_heads": max(1, arm.d // p.knobs.head_dim), "model.dtype": arm.dtype,
      "train.weight_decay": arm.weight_decay, "train.seed": arm.seed,
      "train.data_seed": arm.seed, "name": f"saturation-planted-{arm.name}"})


# d ∈ {8, 16, 64} at Γ ≈ 7.9, d 8 and 64 at Γ ≈ 2.4, d 8 in bfloat16
PYTHIA_ARMS = (Arm(8, 0.1), Arm(16, 0.1), Arm(64, 0.1), Arm(8, 0.03), Arm(64, 0.03),
               Arm(8, 0.1, "bfloat16"))
# seeds 1, 2 of d 8 and 64, a Zipf-1.5 language of V 1024 at d 8 and 32, then seed 0
TAIL_LANG = (("data.options.vocab", 1024), ("data.options.zipf", 1.5))
REPLICATE_ARMS = (tuple(Arm(d, 0.1, seed=s) for s in (1, 2) for d in (8, 64))
                  + (Arm(8, 0.1, lang=TAIL_LANG), Arm(32, 0.1, lang=TAIL_LANG))
                  + (Arm(8, 0.1), Arm(64, 0.1)))
# one GPU: the tail language of V 4096, tokens drawn in the jitted step, d ∈ {32, 128, 512} x
# λ ∈ {0.1, 0.03}, one population per width, by increasing cost
GPU_SEEDS = {32: (0, 1, 2), 128: (0, 1), 512: (0,)}


# the tail language's replicated width order (V 1024, Zipf 1.5): d8 and d32 seeds 0-2, d64
# seeds 0-1 at Γ 7.9, and d32 at Γ 2.4 (λ 0.03) seeds 0-1; one population per width
E1_LANG = {"data.options.vocab": 1024, "data.options.zipf": 1.5}
E1_ARMS = (tuple(Arm(d, 0.1, seed=s) for d, seeds in ((8, (0, 1, 2)), (32, (0, 1, 2)),
                                                      (64, (0, 1))) for s in seeds)
           + tuple(Arm(32, 0.03, seed=s) for s in (0, 1)))


def gpu_arms(dtype: str) -> tuple:
  return tuple(Arm(d, wd, dtype, seed=s) for d, seeds in GPU_SEEDS.items() for s in seeds
               for wd in (0.1, 0.03))


GPU = {"data.source": "planted_tail", "data.options.vocab": 4096, "data.options.rank": 32,
       "data.options.mix": 8, "data.options.zipf": 1.5, "data.options.sampler": "device",
       "model.n_layers": 2, "train.batch_size": 64, "train.seq_len": 128,
       "train.ckpt_every": 1000, "train.log_every": 100, "train.async_checkpoint": True}
GPU_KNOBS = dict(head_dim=32, streaming=True, val_windows=64, floor_mode="svd", population=True)
TINY = {"train.steps": 20, "train.batch_size": 4, "train.seq_len": 16, "train.log_every": 2,
        "data.options.vocab": 32, "data.options.rank": 2, "data.options.mix": 2}
TINY_KNOBS = dict(val_windows=8, n_boot=200, floor_gtol=1e-4, floor_max_iter=300)
TINY_E1 = {**TINY, "data.options.vocab": 64, "data.options.zipf": 1.5, "train.lr": 0.1,
           "train.ckpt_log_spaced": False}  # test-e1's language and lr

PRESETS: dict[str, Preset[Knobs]] = {
    # one arm, test-e1's d8 (one program serves both); quick: no smaller size than cpu's (832 s)
    "test": preset({**TINY_E1, "train.ckpt_every": 5}, Knobs(arms=(Arm(8, 0.1),), **TINY_KNOBS)),
    "quick": preset({**TINY, "train.ckpt_every": 5, "train.ckpt_log_spaced": False},
                    Knobs(arms=(Arm(8, 0.03),), **TINY_KNOBS)),
    "cpu": preset({}, Knobs(arms=PYTHIA_ARMS, floor_gtol=1e-4, floor_max_iter=1000)),
    "tpu": preset({"train.lr": 1e-3, "train.batch_size": 32, "model.n_layers": 2,
                   "train.ckpt_every": 1000, "train.log_every": 100,
                   "train.async_checkpoint": True},
                  Knobs(arms=PYTHIA_ARMS, val_windows=256, streaming=True)),
    "cpu-replicates": preset({}, Knobs(arms=REPLICATE_ARMS, floor_gtol=1e-4,
                                       floor_max_iter=1000)),
    # the tail language's replicated width order and its pre-registered rule (rise_rule)
    "cpu-e1": preset(E1_LANG, Knobs(arms=E1_ARMS, floor_gtol=1e-4, floor_max_iter=1000,
                                    population=True)),
    "test-e1": preset({**TINY_E1, "train.ckpt_every": 4},
                      Knobs(arms=tuple(Arm(d, wd, seed=s) for d, wd, seeds in (
                          (8, 0.1, (0,)), (16, 0.1, (0,)), (32, 0.1, (0, 1)),
                          (16, 0.03, (0,))) for s in seeds), population=True,
                            rule=RiseRule(n_perm=200, block=2, order_perms=2000),
                            **{**TINY_KNOBS, "floor_mode": "svd"})),
    "gpu": preset(GPU, Knobs(arms=gpu_arms("bfloat16"), **GPU_KNOBS)),
    "gpu-fp32": preset(GPU, Knobs(arms=gpu_arms("float32"), **GPU_KNOBS)),
    "gpu-test": preset({**GPU, **TINY, "model.n_layers": 1, "train.ckpt_every": 10},
                       Knobs(arms=tuple(Arm(8, wd, "bfloat16", seed=s) for s in (0, 1)
                                        for wd in (0.1, 0.03)),
                             **{**GPU_KNOBS, "head_dim": 8, "val_windows": 8},
                             n_boot=200)),
}
