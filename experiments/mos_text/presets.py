"""mos_text's presets: a text trunk (dotted Config overrides over the sbjax preset ``tiny``, as
the head-rank sweep's) and the knobs: the heads compared and the init seeds."""

from __future__ import annotations

import dataclasses

from sbjax.studies import head_rank as hr
from sbjax.experiment import Preset

BASE = hr.BASE


@dataclasses.dataclass(frozen=True)
class Knobs:
  # (arm, dotted head overrides): the arms, in report order. "lowrank" with model.head.rank 0
  # gets the rank whose head parameter count is closest to the "mos" arm's (run.matched_rank)
  arms: tuple
  seeds: tuple = (0, 1, 2)  # train.seed of each arm's members (one population per arm)


def _arms(n_mix: int, dim: int) -> tuple:
  """dense, MoS (n_mix linear components of dim), the parameter-matched lowrank."""
  return (("dense", {"model.head": "dense"}),
          ("mos", {"model.head": "mos", "model.head.n_mix": n_mix, "model.head.dim": dim,
                   "model.head.act": "linear"}),
          ("lowrank", {"model.head": "lowrank", "model.head.rank": 0}))


def _text(o: dict) -> dict:
  """The head-rank sweep's text trunk with ``o`` over it; model.vocab_size =
  data.options.vocab_size
  (the head's parameters and FLOPs are counted before the data is built)."""
  o = hr.overrides(o)
  return {**o, "model.vocab_size": o["data.options.vocab_size"]}


PRESETS: dict[str, Preset[Knobs]] = {
    # the suite: V = 96 (sentencepiece's smallest on Shakespeare's 85 characters), d = 8, one
    # layer, 4 steps, MoS 2 x 4 (the cpu shape scaled down), 2 seeds
    "test": Preset(BASE, _text({"name": "mos_text-test", "data.options.vocab_size": 96,
                                "model.d_model": 8, "model.n_layers": 1, "model.n_heads": 1,
                                "model.max_len": 16, "model.rotary_pct": 0.5,
                                "train.steps": 4, "train.batch_size": 4, "train.seq_len": 16,
                                "train.warmup_steps": 1, "train.eval_batches": 2}),
                   Knobs(arms=_arms(2, 4), seeds=(0, 1))),
    "quick": Preset(BASE, _text({"name": "mos_text-quick", "data.options.vocab_size": 256,
                                 "model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2,
                                 "model.max_len": 32, "train.steps": 60, "train.batch_size": 8,
                                 "train.seq_len": 32, "train.warmup_steps": 6,
                                 "train.eval_batches": 4}),
                    Knobs(arms=_arms(2, 8))),
    # issue 33 item 5: V = 1024, d = 32 (2 layers, 4 heads), lr 1e-2 for every arm (the
    # head-rank sweep's cpu grid: 1e-2 won at every rank over 3e-3), 3 init seeds each. MoS:
    # 2 linear components of e = 16 (17 506 head parameters, 67 712 head FLOPs per token):
    # the parameters of lowrank r = 17 (17 952; 35 904 FLOPs) and the FLOPs of the dense head
    # (32 768 parameters; 65 536 FLOPs), so one run gives both comparisons. Size for the
    # issue's budget (45 min of CPU with the planted arm, on 2 cores shared by 7 engineers):
    # 2000 steps at batch 8 x 64 (1M tokens per run, half an epoch of the 42-file Shakespeare
    # corpus at V = 1024, 2.04M tokens); runs at 200 and 1000 steps took 2 and 5.4 min of CPU
    # and left MoS 0.40 and 0.07 nats behind the matched lowrank head (BUILD_NOTES)
    "cpu": Preset(BASE, _text({"name": "mos_text-cpu", "data.options.vocab_size": 1024,
                               "model.d_model": 32, "model.n_layers": 2, "model.n_heads": 4,
                               "train.steps": 2000, "train.batch_size": 8,
                               "train.warmup_steps": 100, "train.eval_batches": 16,
                               "train.lr": 1e-2}),
                  Knobs(arms=_arms(2, 16))),
    "tpu": Preset(BASE, _text({"name": "mos_text-tpu", "data.options.vocab_size": 8192,
                               "model.d_model": 256, "model.n_layers": 4, "model.n_heads": 4,
                               "model.max_len": 256, "train.steps": 10_000,
                               "train.batch_size": 128, "train.seq_len": 256,
                               "train.warmup_steps": 500, "train.lr": 3e-3}),
                  Knobs(arms=_arms(4, 64), seeds=(0, 1, 2, 3, 4))),
}


