"""mos_text's presets: a text trunk (dotted Config overrides over the sbjax preset ``tiny``, as
the head-rank sweep's) and the knobs: the heads compared and the init seeds."""

from __future__ import annotations

import dataclasses

from sbjax.studies import head_rank as hr
from sbjax.experiment import Preset

BASE = hr.BASE


@dataclasses.dataclass(frozen=True)
class Rule:
  """The pre-registered decision on text (``decide``), written before its run: each arm at the
  lr of its smallest mean loss on the held-out tail of the training split, the ``level`` Welch
  interval over seeds of the validation loss difference ``primary`` (lowrank − MoS: equal head
  parameters) above 0 **reproduces** the matched-parameter claim (MoS beats the softmax head
  of equal parameters), below 0 **refutes** it, else **undecided**; ``beside`` (dense − MoS:
  equal head FLOPs) is reported beside it and decides nothing."""

  primary: tuple = ("lowrank", "mos")
  beside: tuple = ("dense", "mos")
  level: float = 0.95


@dataclasses.dataclass(frozen=True)
class Knobs:
  # (arm, dotted head overrides) in report order; lowrank of rank 0: matched to the mos arm
  arms: tuple
  seeds: tuple = (0, 1, 2)  # train.seed of each arm's members (one population per arm)
  lrs: tuple = ()  # every arm at each lr, reported at its chosen one; () = train.lr alone
  select_fraction: float = 0.0  # the held-out tail of the training split (0: none)
  select_batches: int = 0  # its batches the lr is chosen on (sel_loss)
  rule: Rule | None = None


def _arms(n_mix: int, dim: int) -> tuple:
  """dense, MoS (n_mix linear components of dim), the parameter-matched lowrank."""
  return (("dense", {"model.head": "dense"}),
          ("mos", {"model.head": "mos", "model.head.n_mix": n_mix, "model.head.dim": dim,
                   "model.head.act": "linear"}),
          ("lowrank", {"model.head": "lowrank", "model.head.rank": 0}))


def _text(o: dict) -> dict:
  """The head-rank sweep's text trunk with ``o`` over it; model.vocab_size =
  data.options.vocab_size (the head is counted before the data is built)."""
  o = hr.overrides(o)
  return {**o, "model.vocab_size": o["data.options.vocab_size"]}


# the suite's trunk: V = 96 (sentencepiece's smallest on Shakespeare's 85 characters), d = 8,
# one layer, 4 steps
TEST = {"data.options.vocab_size": 96, "model.d_model": 8, "model.n_layers": 1,
        "model.n_heads": 1, "model.max_len": 16, "model.rotary_pct": 0.5, "train.steps": 4,
        "train.batch_size": 4, "train.seq_len": 16, "train.warmup_steps": 1,
        "train.eval_batches": 2}
# V = 1024, d = 32, lr 1e-2 (the head-rank sweep's choice); MoS 2 x 16 has the parameters of
# lowrank r = 17 and the FLOPs of the dense head: both comparisons in one run
CPU = {"data.options.vocab_size": 1024, "model.d_model": 32, "model.n_layers": 2,
       "model.n_heads": 4, "train.batch_size": 8, "train.warmup_steps": 100, "train.lr": 1e-2}

PRESETS: dict[str, Preset[Knobs]] = {
    "test": Preset(BASE, _text({"name": "mos_text-test", **TEST}),
                   Knobs(arms=_arms(2, 4), seeds=(0, 1))),
    "quick": Preset(BASE, _text({"name": "mos_text-quick", "data.options.vocab_size": 256,
                                 "model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2,
                                 "model.max_len": 32, "train.steps": 60, "train.batch_size": 8,
                                 "train.seq_len": 32, "train.warmup_steps": 6,
                                 "train.eval_batches": 4}),
                    Knobs(arms=_arms(2, 8))),
    "cpu": Preset(BASE, _text({"name": "mos_text-cpu", **CPU, "train.steps": 2000,
                               "train.eval_batches": 16}),
                  Knobs(arms=_arms(2, 16))),
    # the pre-registered text test (Rule) at test size: its primary arms (mos, lowrank; the
    # test preset has dense), 2 lrs x 2 seeds per arm, the training split's last fifth held out
    "test-e3": Preset(BASE, _text({"name": "mos_text-test-e3", **TEST}),
                      Knobs(arms=_arms(2, 4)[1:], seeds=(0, 1), lrs=(1e-2, 3e-2),
                            select_fraction=0.2, select_batches=2, rule=Rule())),
    # the pre-registered text test (Rule): the cpu preset's arms, 4000 steps, lr {3e-3, 1e-2,
    # 3e-2} x seeds 0-2 per arm, each lr chosen on 64 batches of the held-out last 5%; a
    # member that diverges keeps its last finite parameters instead of stopping its population
    "cpu-e3": Preset(BASE, _text({"name": "mos_text-cpu-e3", **CPU, "train.steps": 4000,
                                  "train.eval_batches": 64, "train.skip_nonfinite_steps": 4000}),
                     Knobs(arms=_arms(2, 16), lrs=(3e-3, 1e-2, 3e-2), select_fraction=0.05,
                           select_batches=64, rule=Rule())),
    "tpu": Preset(BASE, _text({"name": "mos_text-tpu", "data.options.vocab_size": 8192,
                               "model.d_model": 256, "model.n_layers": 4, "model.n_heads": 4,
                               "model.max_len": 256, "train.steps": 10_000,
                               "train.batch_size": 128, "train.seq_len": 256,
                               "train.warmup_steps": 500, "train.lr": 3e-3}),
                  Knobs(arms=_arms(4, 64), seeds=(0, 1, 2, 3, 4))),
}
