"""The planted experiment's presets, in dotted Config keys over the sbjax preset
``planted-knee``: part 1's overrides (``part1``), part 2's (``Knobs.mix``, over part 1's) and
its mos runs' (``Knobs.mos``); the knobs that are not Config fields are the head ranks, the
part-2 runs, seeds and learning-rate grid, and the tolerances."""

from __future__ import annotations

import dataclasses
from sbjax.experiment import Preset

BASE = "planted-knee"  # sbjax/configs.py; part 2 switches its data to the planted mixture


# part 1 of every preset (a planted language of V = model.vocab_size, planted rank
# data.options.rank): dotted Config keys over BASE; a preset replaces some of them
PART1 = {"model.d_model": 64, "model.n_layers": 1, "model.n_heads": 4, "model.vocab_size": 256,
         "data.options.rank": 8, "data.options.alpha": 4.0,
         "data.options.train_tokens": 2_000_000, "data.options.val_tokens": 131_072,
         "train.steps": 1500, "train.batch_size": 32, "train.seq_len": 64, "train.lr": 1e-2,
         "train.warmup_steps": 50}
# part 2 (dotted keys over part 1's): the planted mixture of data.options.mix softmaxes of
# planted rank data.options.rank (source planted_mix: independent output embeddings per
# component; planted_mos: one shared Y, rotations R_m, so a MoS head with model.head.dim = k+1
# and linear components is exact), its own step count and train.objective: sampled (−log q of
# the sampled next token) or expected (the Rao-Blackwellised loss against the language's exact
# P(.|c); sbjax.losses.expected_loss). Evaluation, checkpoint and logs follow train.steps.
MIX = {"data.source": "planted_mix", "data.options.mix": 4, "data.options.rank": 2,
       "train.steps": 1500, "train.objective": "sampled"}
# the mos runs of part 2 (dotted keys over part 2's). model.init_std: the lowrank runs keep the
# knee part's 0.02. At 0.02 a d=16 MoS head starts with its M tanh projections
# (pre-activations ~0.02·√d) and shared W nearly identical, so the prior collapses onto one
# component and the tanh saturates: the cpu run ended 0.50 nats above H; at 0.2 (≈ GPT-2's
# 0.02·√(768/d)) it ends 0.10 above H. model.head.dim 0 = d_model.
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
  # part 2: dotted Config overrides over part 1's (MIX's keys, replaced) and of its mos runs
  mix: dict = dataclasses.field(default_factory=lambda: dict(MIX))
  mos: dict = dataclasses.field(default_factory=lambda: dict(MOS))
  # part 2's runs: (label, head, d_model, n_mix); lowrank ranks are matched to the first mos run
  mix_runs: tuple = (("mos", "mos", 16, 4), ("lowrank", "lowrank", 64, 0),
                     ("lowrank-d16", "lowrank", 16, 16))
  # train.seed (the init; the data stream is shared) of every part-2 run: each (label, seed) is one run, labelled
  # "label" for seed 0 and "label-s<seed>" otherwise; the report gives the seed spread
  mix_seeds: tuple = (0,)
  # the learning rates of part 2: every arm is trained at each lr and seed, as ONE population
  # per arm (sbjax.train.population: one vmapped step); the report takes each arm's best lr by
  # its mean gap over seeds. () = train.lr alone (and one run per seed when there is one lr)
  mix_lrs: tuple = ()
  # the cells of part 2 (configs.mix_cells): languages ((name, dotted data overrides over
  # ``mix``), ...) x training objectives (train.objective: sampled | expected); () = ``mix``'s
  # own language and objective (arm labels without a cell prefix)
  mix_langs: tuple = ()
  mix_objectives: tuple = ()
  # batches of the selection stream: each arm's lr is chosen on that many batches of an
  # independent sample of the language (run.selection_batches) and reported on the validation
  # stream; 0 = chosen on the reported batches themselves
  select_batches: int = 0
  # fresh init seeds: after the selection populations (mix_seeds), every arm is trained
  # again at the lr it chose, with these seeds (one population per arm; planted_fresh.csv),
  # and the verdicts are given on them alone; () = none (the lr is then chosen on the
  # reported seeds themselves, and the report gives no verdict on them)
  fresh_seeds: tuple = ()
  rule: FreshRule | None = None  # the pre-registered decision on the fresh seeds
  parts: tuple = ("knee", "mix")  # the parts ``run`` runs unless told (run.PARTS)


def part1(o: dict) -> dict:
  """Part 1's dotted overrides: PART1 with ``o`` (dotted keys) over it, plus the keys derived
  from them: the language's vocabulary is the model's, model.max_len = max(train.seq_len, 64),
  evaluation and the checkpoint at the last step, ten log lines per run."""
  o = {**PART1, **o}
  steps = o["train.steps"]
  return {**o, "model.max_len": max(o["train.seq_len"], 64),
          "data.options.vocab": o["model.vocab_size"], "train.eval_every": steps,
          "train.ckpt_every": steps, "train.log_every": max(1, steps // 10)}


# the planted MoS language of the quick and cpu presets (V=256, M=8, k=4, alpha=8), trained on
# the Rao-Blackwellised loss at batch 8; MoS heads with M'=16 linear components of e=k+1=5
MOS_LANGUAGE = {"data.source": "planted_mos", "data.options.mix": 8, "data.options.rank": 4,
                "data.options.alpha": 8.0, "data.options.gate": "uniform",
                "train.objective": "expected", "train.batch_size": 8}
LINEAR_MOS = {**MOS, "model.head.dim": 5, "model.head.act": "linear"}

# issue 33 item 5: the languages of the mos-seeds presets. knee: part 1's planted-rank language
# (V=256, k=8, alpha=4: logits of rank k+1 = 9, which the matched lowrank r=11 represents
# exactly: a language where MoS should NOT win); mos: the planted MoS language of the quick
# and cpu presets (M=8, k=4, alpha=8; chosen after k=8 failed, report.selection_text)
KNEE_LANGUAGE = {"data.source": "planted", "data.options.rank": 8, "data.options.alpha": 4.0}
MOS_DATA = {k: v for k, v in MOS_LANGUAGE.items() if k.startswith("data.")}
# the arms of the mos-seeds presets at d=16: MoS 16 x 5, the parameter-matched lowrank (r=11)
# and MoS at the lowrank head's FLOPs (2 components of e=5: 2 752 head MACs per token against
# 2 992; sbjax.studies.head_flops)
SEEDS_RUNS = (("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0), ("mos-flops", "mos", 16, 2))
SEEDS_LRS = (0.03, 0.1, 0.3)

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite and `reproduce --preset=test`: V=32, k=3, d=16, 30 steps, 2 knee runs and
    # 2 mixture populations of 2 seeds on the Rao-Blackwellised loss
    "test": Preset(BASE, part1({"model.vocab_size": 32, "data.options.rank": 3,
                                "model.d_model": 16, "model.n_heads": 2, "train.steps": 30,
                                "train.batch_size": 8, "train.seq_len": 16,
                                "train.warmup_steps": 5, "data.options.train_tokens": 20_000,
                                "data.options.val_tokens": 4096}),
                   Knobs(ranks=(1, 16), measure_batches=2,
                         mix={**MIX, "data.options.mix": 2, "train.steps": 30,
                              "train.objective": "expected"},
                         mix_runs=(("mos", "mos", 16, 2), ("lowrank", "lowrank", 16, 0)),
                         mix_seeds=(0, 1))),
    # `reproduce --quick`: 7 ranks, 600 steps each; part 2 on the planted MoS language of the
    # cpu preset (V=256, M=8, k=4, alpha=8): MoS with M'=16 components of e=k+1=5, linear, vs
    # the parameter-matched lowrank (r=11), both at d=16, trained on the Rao-Blackwellised
    # loss at lr 0.1 (the cpu preset's grid picks 0.1 for both heads), batch 8, two init seeds
    # each (one population per head)
    "quick": Preset(BASE, part1({"train.steps": 600}),
                    Knobs(ranks=(1, 2, 4, 8, 9, 16, 64), measure_batches=16,
                          mix={**MOS_LANGUAGE, "train.steps": 1000}, mos=LINEAR_MOS,
                          mix_seeds=(0, 1), mix_lrs=(0.1,),
                          mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0)))),
    # part 2 on the planted MoS language (V=256, M=8, k=4, alpha=8), every head at d=16: MoS
    # with M'=16 linear components of e=k+1=5 (over-complete in components: at the issue's
    # guide language, M=8, k=8, the exact-size head's fits stop 0.046 above H; BUILD_NOTES),
    # the parameter-matched lowrank (r=11), r=d=16 and a parameter-matched sigsoftmax; every
    # head on the Rao-Blackwellised loss (batch 8, 1500 steps) at three learning rates and two
    # init seeds, one population per head (the report takes each head at its best lr).
    "cpu": Preset(BASE, part1({"train.steps": 1000}),
                  Knobs(ranks=(1, 2, 3, 4, 6, 8, 9, 10, 16, 32, 64),
                        mix={**MOS_LANGUAGE, "train.steps": 1500}, mos=LINEAR_MOS,
                        mix_seeds=(0, 1), mix_lrs=(1e-2, 3e-2, 1e-1),
                        mix_runs=(("mos", "mos", 16, 16), ("lowrank", "lowrank", 16, 0),
                                  ("lowrank-d16", "lowrank", 16, 16),
                                  ("sigsoftmax", "sigsoftmax", 16, 0)))),
    # issue 33 item 5 at test size: both languages at V=32 (knee k=3 with sampled targets;
    # MoS M=2, k=2 with the Rao-Blackwellised loss), the three arms, 2 lrs x 2 seeds per
    # population (6 populations), the lr chosen on 2 batches of the selection stream
    "test-mos-seeds": Preset(BASE, part1({"model.vocab_size": 32, "data.options.rank": 3,
                                          "model.d_model": 16, "model.n_heads": 2,
                                          "train.steps": 4, "train.batch_size": 4,
                                          "train.seq_len": 8, "train.warmup_steps": 1,
                                          "data.options.train_tokens": 4096,
                                          "data.options.val_tokens": 2048}),
                             Knobs(ranks=(4,), measure_batches=2, select_batches=2,
                                   # the lowrank arm's floors from the svd, warm and down
                                   # starts alone: the same floors here as with 4 random + 2
                                   # wide starts (1.5450, 0.7147, both converged), in 0.1 s
                                   # of CPU instead of 3.6 s
                                   floor_random=0, floor_wide=0,
                                   parts=("mix",), mix={"train.steps": 4},
                                   mos=LINEAR_MOS | {"model.head.dim": 3},
                                   mix_langs=(("knee", {"data.source": "planted",
                                                        "data.options.rank": 3}, ("sampled",)),
                                              ("mos", {**MOS_DATA, "data.options.mix": 2,
                                                       "data.options.rank": 2},
                                               ("expected",))),
                                   mix_seeds=(0, 1), mix_lrs=(0.03, 0.1),
                                   mix_runs=(("mos", "mos", 16, 4),
                                             ("lowrank", "lowrank", 16, 0),
                                             ("mos-flops", "mos", 16, 1)))),
    # issue 33 item 5: both planted languages (knee, mos) x sampled targets (the headline)
    # and the Rao-Blackwellised loss beside it, x the three arms of
    # SEEDS_RUNS; 5 init seeds x 3 lrs = 15 members in ONE population per arm (one compile);
    # the lr of each arm chosen on 64 batches of an independent selection stream, reported on
    # 64 batches of the validation stream (with 8, the mean KL of one run moved by up to 0.05
    # between samples: rare contexts carry most of it). Size, for the budget (45 min
    # of CPU with the text arm, on 2 cores shared by 7 engineers; one got ~20% of a core):
    # 200 steps at batch 8 x 32 (the languages have context 1, so the sequence length only
    # sets the positions per step), 12 populations of 15 (about 10 min of CPU). That is 51k
    # training positions per run, a tenth of the quick preset's (1000 x 8 x 64): the gaps are
    # training-limited and the report says so.
    "cpu-mos-seeds": Preset(BASE, part1({"train.seq_len": 32}),
                            Knobs(ranks=(9,), measure_batches=64, select_batches=64,
                                  parts=("mix",), mix={"train.steps": 200, "train.batch_size": 8},
                                  mos=LINEAR_MOS,
                                  mix_langs=(("knee", KNEE_LANGUAGE), ("mos", MOS_DATA)),
                                  mix_objectives=("sampled", "expected"),
                                  mix_seeds=(0, 1, 2, 3, 4), mix_lrs=SEEDS_LRS,
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
    # the fresh-seed MoS test (FreshRule, pre-registered before its run): the planted MoS
    # language (V=256, M=8, k=4, alpha=8) with sampled targets, 1000 steps at batch 8 x 64
    # (the quick preset's 1000-step size); the arms of SEEDS_RUNS (MoS 16 x 5, the matched
    # lowrank r=11, MoS 2 x 5 at its FLOPs), each at lr {0.03, 0.1, 0.3, 1.0} x seeds 0-4 (one
    # population of 20 per arm), its lr chosen on 64 batches of the selection stream; then
    # seeds 5-9 at that lr (one population of 5 per arm), reported on 64 validation batches.
    # The rule: MoS below the rank-11 exact floor gap on all five fresh seeds.
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
