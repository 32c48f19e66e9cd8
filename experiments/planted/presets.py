"""The planted experiment's presets, in dotted Config keys over the sbjax preset
``planted-knee``: part 1's overrides (``part1``), part 2's (``Knobs.mix``, over part 1's) and
its mos runs' (``Knobs.mos``); the knobs that are not Config fields are the head ranks, the
part-2 runs, seeds and learning-rate grid, and the tolerances."""

from __future__ import annotations

import dataclasses
from sbjax.experiment import Preset

BASE = "planted-knee"  # sbjax/configs.py; part 2 switches its data to the planted mixture

# part 1 (a planted language of V = model.vocab_size, planted rank data.options.rank)
PART1 = {"model.d_model": 64, "model.n_layers": 1, "model.n_heads": 4, "model.vocab_size": 256,
         "data.options.rank": 8, "data.options.alpha": 4.0,
         "data.options.train_tokens": 2_000_000, "data.options.val_tokens": 131_072,
         "train.steps": 1500, "train.batch_size": 32, "train.seq_len": 64, "train.lr": 1e-2,
         "train.warmup_steps": 50}
# part 2: a mixture of data.options.mix softmaxes (planted_mix: an output embedding per
# component; planted_mos: one shared Y rotated per component, so a linear MoS head with
# model.head.dim = k+1 is exact); train.objective sampled or expected (Rao-Blackwellised)
MIX = {"data.source": "planted_mix", "data.options.mix": 4, "data.options.rank": 2,
       "train.steps": 1500, "train.objective": "sampled"}
# the mos runs: init_std 0.2 (at the lowrank runs' 0.02 the tanh MoS collapses onto one
# component); model.head.dim 0 = d_model
MOS = {"model.init_std": 0.2, "model.head.dim": 0, "model.head.act": "tanh"}


@dataclasses.dataclass(frozen=True)
class FreshRule:
  """The pre-registered decision of the fresh-seed MoS test (``stats.decide``), written before
  its run. In cell ``cell`` (language/objective), on the fresh seeds, each arm at the lr it
  chose on the selection stream of the selection seeds: **supports** when every fresh run of
  ``mos`` ends below the exact floor gap (floor(r) − H, the floor fit's) of ``floor_of``'s
  rank; **refutes** when none does; **undecided** when some do, with fewer than ``n_fresh``
  fresh runs, or when a ``floor_of`` run ends more than ``floor_tol`` below that floor (the
  fit did not find the minimum, so the floor is not exact)."""

  cell: str = "mos/sampled"
  mos: str = "mos"
  floor_of: str = "lowrank"
  n_fresh: int = 5
  floor_tol: float = 1e-4  # as stats.FLOOR_TOL


@dataclasses.dataclass(frozen=True)
class Knobs:
  ranks: tuple  # head ranks of part 1
  measure_batches: int = 32  # validation batches of the final measurement
  tol: float = 0.05  # knee tolerance (nats)
  margin: float = 0.02  # r <= k/2: loss - H >= floor gap - margin
  floor_gtol: float = 1e-6
  floor_max_iter: int = 3000
  floor_random: int = 4  # random small-scale starts per rank of the floor fits (sbjax.studies.floor)
  floor_wide: int = 2  # random wide starts per rank of the floor fits (floor.N_WIDE)
  mix: dict = dataclasses.field(default_factory=lambda: dict(MIX))  # part 2, over part 1
  mos: dict = dataclasses.field(default_factory=lambda: dict(MOS))  # its mos runs, over part 2
  # part 2's runs: (label, head, d_model, n_mix); n_mix 0: the rank matched to the first mos run
  mix_runs: tuple = (("mos", "mos", 16, 4), ("lowrank", "lowrank", 64, 0),
                     ("lowrank-d16", "lowrank", 16, 16))
  mix_seeds: tuple = (0,)  # train.seed of every part-2 run (the data stream is shared)
  mix_lrs: tuple = ()  # every arm at each lr and seed, one population per arm; () = train.lr
  # the cells of part 2: languages ((name, dotted data overrides over ``mix``), ...) x
  # objectives; no languages: ``mix``'s own language and objective (plain labels)
  mix_langs: tuple = ()
  mix_objectives: tuple = ()
  select_batches: int = 0  # batches of the selection stream the lr is chosen on; 0: reported
  fresh_seeds: tuple = ()  # retrained at each arm's chosen lr (planted_fresh.csv); () = none
  rule: FreshRule | None = None  # the pre-registered decision on the fresh seeds
  parts: tuple = ("knee", "mix")


def part1(o: dict) -> dict:
  """Part 1's dotted overrides: PART1 with ``o`` over it; the language's vocabulary is the
  model's, model.max_len = max(train.seq_len, 64), eval and checkpoint at the last step."""
  o = {**PART1, **o}
  steps = o["train.steps"]
  return {**o, "model.max_len": max(o["train.seq_len"], 64),
          "data.options.vocab": o["model.vocab_size"], "train.eval_every": steps,
          "train.ckpt_every": steps, "train.log_every": max(1, steps // 10)}


# the planted MoS language (V=256, M=8, k=4, alpha=8) on the Rao-Blackwellised loss at batch 8
MOS_LANGUAGE = {"data.source": "planted_mos", "data.options.mix": 8, "data.options.rank": 4,
                "data.options.alpha": 8.0, "data.options.gate": "uniform",
                "train.objective": "expected", "train.batch_size": 8}
LINEAR_MOS = {**MOS, "model.head.dim": 5, "model.head.act": "linear"}
# the knee language (logits of rank k+1 = 9: the matched lowrank r=11 is exact, MoS should not win)
KNEE_LANGUAGE = {"data.source": "planted", "data.options.rank": 8, "data.options.alpha": 4.0}
MOS_DATA = {k: v for k, v in MOS_LANGUAGE.items() if k.startswith("data.")}
# at d=16: MoS 16 x 5, the parameter-matched lowrank (r=11), MoS 2 x 5 at its head FLOPs
SEEDS_RUNS = (("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0), ("mos-flops", "mos", 16, 2))

PRESETS: dict[str, Preset[Knobs]] = {
    # the suite: V=32, k=3, d=16, 30 steps, 2 knee runs, 2 mixture populations of 2 seeds,
    # single-start floors (the multi-start fit: tests/unit/test_floor.py)
    "test": Preset(BASE, part1({"model.vocab_size": 32, "data.options.rank": 3,
                                "model.d_model": 16, "model.n_heads": 2, "train.steps": 30,
                                "train.batch_size": 8, "train.seq_len": 16,
                                "train.warmup_steps": 5, "data.options.train_tokens": 20_000,
                                "data.options.val_tokens": 4096}),
                   Knobs(ranks=(1, 16), measure_batches=2, floor_random=0, floor_wide=0,
                         mix={**MIX, "data.options.mix": 2, "train.steps": 30,
                              "train.objective": "expected"},
                         mix_runs=(("mos", "mos", 16, 2), ("lowrank", "lowrank", 16, 0)),
                         mix_seeds=(0, 1))),
    # `reproduce --quick`: 7 ranks; MoS 16 x 5 against the matched lowrank (r=11) on the MoS
    # language at lr 0.1 (the cpu grid's choice for both), two seeds
    "quick": Preset(BASE, part1({"train.steps": 600}),
                    Knobs(ranks=(1, 2, 4, 8, 9, 16, 64), measure_batches=16,
                          mix={**MOS_LANGUAGE, "train.steps": 1000}, mos=LINEAR_MOS,
                          mix_seeds=(0, 1), mix_lrs=(0.1,),
                          mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0)))),
    # part 2 on the MoS language at d=16: MoS 16 x 5, the matched lowrank, r=d and a matched
    # sigsoftmax, three lrs x two seeds per head
    "cpu": Preset(BASE, part1({"train.steps": 1000}),
                  Knobs(ranks=(1, 2, 3, 4, 6, 8, 9, 10, 16, 32, 64),
                        mix={**MOS_LANGUAGE, "train.steps": 1500}, mos=LINEAR_MOS,
                        mix_seeds=(0, 1), mix_lrs=(1e-2, 3e-2, 1e-1),
                        mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0),
                                  ("lowrank-d16", "lowrank", 16, 16),
                                  ("sigsoftmax", "sigsoftmax", 16, 0)))),
    # both languages x both objectives x the arms of SEEDS_RUNS, 5 seeds x 3 lrs per population,
    # lrs chosen on 64 batches of the selection stream; 200 steps (training-limited)
    "cpu-mos-seeds": Preset(BASE, part1({"train.seq_len": 32}),
                            Knobs(ranks=(9,), measure_batches=64, select_batches=64,
                                  parts=("mix",), mix={"train.steps": 200, "train.batch_size": 8},
                                  mos=LINEAR_MOS,
                                  mix_langs=(("knee", KNEE_LANGUAGE), ("mos", MOS_DATA)),
                                  mix_objectives=("sampled", "expected"),
                                  mix_seeds=(0, 1, 2, 3, 4), mix_lrs=(0.03, 0.1, 0.3),
                                  mix_runs=SEEDS_RUNS)),
    # the fresh-seed MoS test (FreshRule, pre-registered) at test size: the MoS language at
    # V=32 (M=2, k=2) with sampled targets, the three arms, 2 lrs x selection seeds (0, 1),
    # then fresh seeds (2, 3) at each arm's chosen lr
    "test-e3": Preset(BASE, part1({"model.vocab_size": 32, "model.d_model": 16,
                                   "model.n_heads": 2, "train.steps": 4, "train.batch_size": 4,
                                   "train.seq_len": 8, "train.warmup_steps": 1,
                                   "data.options.train_tokens": 4096,
                                   "data.options.val_tokens": 2048}),
                      Knobs(ranks=(4,), measure_batches=2, select_batches=2, floor_random=0,
                            floor_wide=0, parts=("mix",), mix={"train.steps": 4},
                            mos=LINEAR_MOS | {"model.head.dim": 3},
                            mix_langs=(("mos", {**MOS_DATA, "data.options.mix": 2,
                                                "data.options.rank": 2}),),
                            mix_objectives=("sampled",), mix_seeds=(0, 1), fresh_seeds=(2, 3),
                            mix_lrs=(0.03, 0.1), rule=FreshRule(n_fresh=2),
                            mix_runs=(("mos", "mos", 16, 4), ("lowrank", "lowrank", 16, 0),
                                      ("mos-flops", "mos", 16, 1)))),
    # the fresh-seed MoS test (FreshRule, pre-registered before its run): the MoS language with
    # sampled targets, 1000 steps at batch 8 x 64, the arms of SEEDS_RUNS at lr {0.03, 0.1,
    # 0.3, 1.0} x seeds 0-4 (lr chosen on 64 selection batches), then seeds 5-9 at that lr
    "cpu-e3": Preset(BASE, part1({}),
                     Knobs(ranks=(9,), measure_batches=64, select_batches=64, parts=("mix",),
                           # a member that diverges at a large lr keeps its last finite
                           # parameters (its steps skipped) instead of stopping its population
                           mix={"train.steps": 1000, "train.batch_size": 8,
                                "train.skip_nonfinite_steps": 1000}, mos=LINEAR_MOS,
                           mix_langs=(("mos", MOS_DATA),), mix_objectives=("sampled",),
                           mix_seeds=(0, 1, 2, 3, 4), fresh_seeds=(5, 6, 7, 8, 9),
                           mix_lrs=(0.03, 0.1, 0.3, 1.0), mix_runs=SEEDS_RUNS,
                           rule=FreshRule())),
    # the paper's scale in spirit: a larger vocabulary and planted rank, a 2-layer d=256 model
    "tpu": Preset(BASE, part1({"model.vocab_size": 1024, "data.options.rank": 32,
                               "model.d_model": 256, "model.n_layers": 2, "model.n_heads": 4,
                               "train.steps": 20_000, "train.batch_size": 256,
                               "train.seq_len": 128, "train.lr": 3e-3,
                               "train.warmup_steps": 500,
                               "data.options.train_tokens": 200_000_000,
                               "data.options.val_tokens": 1_048_576}),
                  Knobs(ranks=(1, 2, 4, 8, 16, 24, 30, 32, 33, 34, 36, 40, 48, 64, 128, 256),
                        measure_batches=32,
                        mix={**MIX, "data.options.mix": 8, "data.options.rank": 16,
                             "train.steps": 20_000},
                        mos={**MOS, "model.init_std": 0.02},
                        mix_runs=(("mos", "mos", 256, 8), ("lowrank", "lowrank", 512, 0),
                                  ("dense", "lowrank", 512, 512)))),
}
