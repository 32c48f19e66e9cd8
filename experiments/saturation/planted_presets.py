"""The planted preset family of the saturation experiment (``--preset=<name>-planted``):
arms of width d and weight decay λ on the planted mixture language, run by Γ = λ Σ η. A
preset is a ``Preset``: dotted Config overrides of ``planted`` (``overrides``) and ``Knobs``.

An arm is (d, λ). Every arm of a preset trains for the same number of steps, chosen by
``sbjax.optim.steps_for_gamma`` so that the reference arms (λ = ``ref_weight_decay``) reach
``target_gamma``; an arm with another λ then reaches Γ_total = λ / λ_ref · target (e.g.
λ = 0.03: Γ ≈ 2.4, like Pythia-410m). Fresh tokens every step: the train stream holds
exactly steps · batch windows, so no window repeats and nothing can be over-fitted.
"""

from __future__ import annotations

import dataclasses

from ..shared import Preset, config_from, pick_preset
from sbjax import optim
from sbjax.config import Config, TrainConfig


@dataclasses.dataclass(frozen=True)
class Arm:
  d: int  # model width = head rank bound
  weight_decay: float  # λ
  dtype: str = "float32"  # compute dtype (model.dtype); softmax and loss stay float32
  # the replicate: train.seed (init) AND train.data_seed are both set to it. A replicate
  # redraws every random choice of training: the init and the order of the train windows (a
  # stored stream holds the same fresh tokens, drawn from data.options.seed, in another order;
  # a streaming one draws other tokens). The language and its validation windows (independent
  # of the data seed) stay fixed, so the seeds' rises are measured on the same windows.
  seed: int = 0
  # the arm's own language: dotted data.options.* overrides over the preset's, as
  # ((key, value), ...); () = the preset's language
  lang: tuple = ()

  @property
  def name(self) -> str:
    return arm_name(self.d, self.weight_decay, self.dtype, self.seed, self.lang)


def lang_tag(lang: tuple) -> str:
  """"" for the preset's language, else -<option><value>... (e.g. -vocab1024-zipf1.5)."""
  return "".join(f"-{k.removeprefix('data.options.')}{v:g}" for k, v in lang)


def arm_name(d: int, weight_decay: float, dtype: str = "float32", seed: int = 0,
             lang: tuple = ()) -> str:
  """d<d>-wd<λ>, with a -bf16 / -fp16 suffix for a reduced-precision arm, the language's tag
  (``lang_tag``) and -s<seed> for a seed other than 0 (seed 0 keeps the name it always had)."""
  suffix = {"float32": "", "bfloat16": "-bf16", "float16": "-fp16"}.get(dtype, f"-{dtype}")
  return f"d{d}-wd{weight_decay:g}{suffix}{lang_tag(lang)}" + (f"-s{seed}" if seed else "")


@dataclasses.dataclass(frozen=True)
class Knobs:
  """What is not a Config field: the arms, the Γ target that sets the step count, the
  derivation rules of ``overrides`` and the readout."""
  arms: tuple
  target_gamma: float = 7.9  # Γ_total of the reference arms (Pythia-14m/70m)
  ref_weight_decay: float = 0.1
  warmup_frac: float = 0.01  # train.warmup_steps = round(warmup_frac · train.steps)
  head_dim: int = 8  # model.n_heads = max(1, d // head_dim)
  streaming: bool = False  # train batches sampled on demand (data.options.train_tokens = 0)
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
  # "fit": floor(d) by ``sbjax.studies.floor.floor_curve`` (best of several L-BFGS starts);
  # "svd": only its svd start's value, a certified upper bound floor(d) ≤ F(svd_d) (one SVD of
  # the π-weighted centred log-probs; the fit takes hours at V = 4096 on a CPU)
  floor_mode: str = "fit"
  small_d: int = 16  # the width account: "exactly the arms with d ≤ small_d rise"
  # the device presets: arms of one shape (d, dtype, language) train as ONE population
  # (members differ in λ and seed, one vmapped step); a time budget in seconds since the run
  # began (0 = none): the time of the remaining steps is projected after estimate_at steps
  # (after a 10-step warm-up) and a population that would end past it stops cleanly, resumable
  # (``planted_budget``)
  population: bool = False
  budget_s: float = 0.0
  estimate_at: int = 200


BASE = "planted"
# the cpu preset's Config in dotted keys over BASE (the per-arm keys aside); the other presets
# replace some of them. The planted mixture language: V = data.options.vocab, M =
# data.options.mix, k = data.options.rank. Besides the log-spaced 0, 1, 2, 4, ... checkpoints
# one every train.ckpt_every steps. train.steps 0 = the Γ target of the knobs.
CPU = {"data.source": "planted_mix", "data.options.vocab": 256, "data.options.rank": 8,
       "data.options.mix": 4, "data.options.alpha": 4.0, "data.options.context": 1,
       "data.options.seed": 0, "model.n_layers": 1, "train.steps": 0, "train.batch_size": 8,
       "train.seq_len": 64, "train.lr": 1e-2, "train.min_lr_ratio": 0.1, "train.b1": 0.9,
       "train.b2": 0.95, "train.clip": 1.0, "train.eval_batches": 1, "train.log_every": 25,
       "train.ckpt_every": 250, "train.ckpt_log_spaced": True}


def gamma_steps(lr: float, k: Knobs) -> int:
  """The step count at which the reference arms (λ = ref_weight_decay) reach target_gamma."""
  return optim.steps_for_gamma(TrainConfig(lr=lr, weight_decay=k.ref_weight_decay),
                               k.target_gamma, k.warmup_frac).steps


def overrides(o: dict, k: Knobs) -> dict:
  """CPU with the preset's dotted keys ``o`` over it, and the keys derived from them and the
  knobs: train.steps (the Γ target when 0), the warm-up, fresh tokens every step (the train
  stream holds exactly steps · batch windows), the validation stream, one eval at the end,
  model.vocab_size = data.options.vocab and model.max_len = train.seq_len."""
  o = {**CPU, **o}
  steps = o["train.steps"] or gamma_steps(o["train.lr"], k)
  batch, seq_len = o["train.batch_size"], o["train.seq_len"]
  return {**o, "model.vocab_size": o["data.options.vocab"], "model.max_len": seq_len,
          "train.steps": steps, "train.warmup_steps": int(round(k.warmup_frac * steps)),
          "train.eval_every": steps,
          "data.options.train_tokens": 0 if k.streaming else steps * batch * seq_len + 1,
          "data.options.val_tokens": max(k.val_windows, batch) * seq_len + 1}


def planted_preset(o: dict, k: Knobs) -> Preset:
  return Preset(BASE, overrides(o, k), k)


def arm_config(p: Preset, arm: Arm) -> Config:
  """The validated Config of one arm: the preset's overrides, the arm's language options
  (model.vocab_size follows data.options.vocab) and its width, heads, dtype, weight decay and
  seeds (train.seed = train.data_seed = arm.seed)."""
  o = {**p.overrides, **dict(arm.lang)}
  return config_from(p.base, {
      **o, "model.vocab_size": o["data.options.vocab"], "model.d_model": arm.d,
      "model.n_heads": max(1, arm.d // p.knobs.head_dim), "model.dtype": arm.dtype,
      "train.weight_decay": arm.weight_decay, "train.seed": arm.seed,
      "train.data_seed": arm.seed, "name": f"saturation-planted-{arm.name}"})


# Pythia's arms: d ∈ {8, 16, 64} at Γ ≈ 7.9; d = 8 at λ = 0.03 (Γ ≈ 2.4, Pythia-410m); d = 64
# at the same λ = 0.03, so that width and Γ are decoupled.
PYTHIA_ARMS = (Arm(8, 0.1), Arm(16, 0.1), Arm(64, 0.1), Arm(8, 0.03), Arm(64, 0.03))
# ... and d = 8 at Γ ≈ 7.9 computed in bfloat16 (Pythia trained in fp16; parameters, softmax
# and loss stay float32): the precision arm
BF16_ARM = Arm(8, 0.1, "bfloat16")

# issue 33 item 1, the replicates: seeds 0, 1, 2 of d = 8 and d = 64 at λ = 0.1 (Γ 7.9) on
# cpu-planted's language (seed 0 is cpu-planted's arm, same Config), then a Zipf-1.5 tail
# language with V = 1024 (the rest as cpu-planted) at d ∈ {8, 32}, seed 0. Seed 0's arms run
# last: their numbers are already known (BUILD_NOTES, session 9).
TAIL_LANG = (("data.options.vocab", 1024), ("data.options.zipf", 1.5))
REPLICATE_ARMS = (tuple(Arm(d, 0.1, seed=s) for s in (1, 2) for d in (8, 64))
                  + (Arm(8, 0.1, lang=TAIL_LANG), Arm(32, 0.1, lang=TAIL_LANG))
                  + (Arm(8, 0.1), Arm(64, 0.1)))

# issue 32, item 3, `saturation` (one H200, ≤ 8 min): the rare-token tail language
# (``sbjax.data.planted_tail``: V 4096, M 8 components of rank 32, Zipf 1.5, H 3.5715 nats),
# fresh tokens drawn inside the jitted step (data.options.sampler = device), d ∈ {32, 128, 512}
# x λ ∈ {0.1, 0.03} (Γ 7.9 / 2.4 at η 1e-2, 14,377 steps), 2 layers, batch 64 x 128. The arms
# of one width are ONE population (λ and seed vary between members). Seed replicates where
# the time is cheapest: 3 seeds at d 32, 2 at d 128, 1 at d 512. Size (an ESTIMATE from FLOPs,
# not measured: no GPU was lent; benchmarks/step_timing.py measures it on the device): 6 ·
# params · tokens = 0.12 / 0.70 / 6.1 PFLOP per member at d 32 / 128 / 512, 15.7 PFLOP for
# the 12 members. In float32 a GPU computes at HIGHEST precision (~6 bf16 passes): at
# ~40 TFLOP/s that is ~6.5 min of matmuls alone, before compiles, the sampler, checkpoints,
# measurement and floors: over 8 min. So gpu-planted computes in bfloat16 (parameters,
# softmax and loss stay float32; every arm alike, so the width and Γ contrasts are not
# confounded; Pythia trained in fp16): ~1 min of matmuls at ~300 TFLOP/s. gpu-planted-fp32
# runs the same arms in float32 (the budget stop ends it with the populations it finished).
# Populations run by increasing cost, so a budget stop keeps the cheap ones.
GPU_SEEDS = {32: (0, 1, 2), 128: (0, 1), 512: (0,)}


def gpu_arms(dtype: str) -> tuple:
  return tuple(Arm(d, wd, dtype, seed=s) for d, seeds in GPU_SEEDS.items() for s in seeds
               for wd in (0.1, 0.03))


GPU_ARMS = gpu_arms("bfloat16")
GPU = {"data.source": "planted_tail", "data.options.vocab": 4096, "data.options.rank": 32,
       "data.options.mix": 8, "data.options.zipf": 1.5, "data.options.sampler": "device",
       "model.n_layers": 2, "train.batch_size": 64, "train.seq_len": 128,
       "train.ckpt_every": 1000, "train.log_every": 100,
       # ~28 checkpoints per member (log-spaced, then every 1000 steps), 12 members: saved
       # while the next steps run
       "train.async_checkpoint": True}
# head_dim 32: 1, 4 and 16 attention heads; floors: the svd bound (the fit takes hours at
# V 4096); the width account: "only d 32 rises"
GPU_KNOBS = dict(head_dim=32, streaming=True, val_windows=64, floor_mode="svd", small_d=32,
                 population=True, budget_s=450.0, estimate_at=200)

PLANTED_PRESETS: dict[str, Preset[Knobs]] = {
    # the e2e test: a tiny language, one arm (each arm costs ~15 s of compilation on CPU;
    # the multi-arm readout is unit-tested), 20 steps, checkpoints 0, 5, 10, 15, 20 (no
    # log-spaced ones: the checks against numpy hold at any checkpoint count; 5 instead of 8
    # saves, loads and measurements)
    "test-planted": planted_preset(
        {"train.steps": 20, "train.batch_size": 4, "train.seq_len": 16, "train.ckpt_every": 5,
         "train.ckpt_log_spaced": False, "train.log_every": 2, "data.options.vocab": 32,
         "data.options.rank": 2, "data.options.mix": 2},
        Knobs(arms=(Arm(8, 0.03),), val_windows=8, n_boot=200, floor_gtol=1e-4,
              floor_max_iter=300)),
    # 2 CPU cores: the recipe (η = 1e-2, λ = 0.1, 1% warm-up, cosine to 10%, Γ = 7.9
    # in 14,377 steps) at 8 x 64 tokens per step (7.4M fresh tokens per arm), one layer.
    # Time (BUILD_NOTES): the five float32 arms took 832 s user + 57 s system CPU in session 7
    # (67 min wall under heavy contention; quiet wall not measured); the bf16 arm is new and
    # not yet timed at this scale.
    # Floors: gtol 1e-4 / 1000 L-BFGS iterations reproduce the guide's floor(d) − H (8: 0.624,
    # 16: 0.236, 64: 0.0068 nats) in ~2 min on the loaded machine (cached in OUT).
    "cpu-planted": planted_preset({}, Knobs(arms=PYTHIA_ARMS + (BF16_ARM,), floor_gtol=1e-4,
                                            floor_max_iter=1000)),
    # the replicates (REPLICATE_ARMS); floors as cpu-planted's, per language
    "cpu-replicates": planted_preset({}, Knobs(arms=REPLICATE_ARMS, floor_gtol=1e-4,
                                               floor_max_iter=1000)),
    # ... at test size: two seeds and a second language (V 64, Zipf 1.5) of test-planted's
    "test-replicates": planted_preset(
        {"train.steps": 20, "train.batch_size": 4, "train.seq_len": 16, "train.ckpt_every": 10,
         "train.log_every": 2, "data.options.vocab": 32, "data.options.rank": 2,
         "data.options.mix": 2},
        Knobs(arms=(Arm(8, 0.1, seed=1), Arm(8, 0.1, lang=(("data.options.vocab", 64),
                                                           ("data.options.zipf", 1.5)))),
              val_windows=8, n_boot=200, floor_gtol=1e-4, floor_max_iter=300)),
    # issue 32's device preset (GPU above) and its test-size twin (the suite and
    # `device_science.sh saturation --dry-run`: a tail language of V 32, one width, two λ x
    # two seeds as one population, 20 steps, the estimate after 4 timed steps)
    "gpu-planted": planted_preset(GPU, Knobs(arms=GPU_ARMS, **GPU_KNOBS)),
    "gpu-planted-fp32": planted_preset(GPU, Knobs(arms=gpu_arms("float32"), **GPU_KNOBS)),
    "gpu-planted-test": planted_preset(
        {**GPU, "data.options.vocab": 32, "data.options.rank": 2, "data.options.mix": 2,
         "model.n_layers": 1, "train.steps": 20, "train.batch_size": 4, "train.seq_len": 16,
         "train.ckpt_every": 10, "train.log_every": 2},
        Knobs(arms=tuple(Arm(8, wd, "bfloat16", seed=s) for s in (0, 1) for wd in (0.1, 0.03)),
              **{**GPU_KNOBS, "head_dim": 8, "val_windows": 8, "small_d": 8,
                 "budget_s": 300.0, "estimate_at": 4}, n_boot=200)),
    # Pythia-14m's learning rate (1e-3) and step count for Γ = 7.9 (143,770 steps, Pythia:
    # 143,000) at 32 x 64 tokens per step (294M fresh tokens per arm, sampled on demand:
    # sbjax.data.planted_stream), 2 layers; not run yet
    "tpu-planted": planted_preset(
        {"train.lr": 1e-3, "train.batch_size": 32, "model.n_layers": 2,
         "train.ckpt_every": 1000, "train.log_every": 100,
       # ~28 checkpoints per member (log-spaced, then every 1000 steps), 12 members: saved
       # while the next steps run
       "train.async_checkpoint": True},
        Knobs(arms=PYTHIA_ARMS + (BF16_ARM,), val_windows=256, streaming=True)),
}


def knobs_record(p: Preset, cfg: Config) -> dict:
  """The knobs and the training fields of the arms' Config (``cfg``, any arm's) as one flat
  record: planted_meta.json's "knobs", which the report reads."""
  t = cfg.train
  return {**dataclasses.asdict(p.knobs), "steps": t.steps, "lr": t.lr, "batch": t.batch_size,
          "seq_len": t.seq_len, "n_layers": cfg.model.n_layers, "ckpt_every": t.ckpt_every,
          "log_every": t.log_every, "vocab": cfg.model.vocab_size}


def get_planted_preset(name) -> Preset:
  return pick_preset(PLANTED_PRESETS, name, "saturation (planted)")
