"""vocab_threshold's presets: head-rank sweeps (protocol b and the dense reference) at several
vocabulary sizes; config overrides as in ``experiments.head_rank``, knobs = the vocabulary
sizes and each sweep's plan."""

from __future__ import annotations

import dataclasses

from sbjax.studies import head_rank as hr
from sbjax.studies.presets import Preset, pick_preset
from .bigram_n import BigramNKnobs
from .ngram import NgramKnobs

TOL = 0.02  # the older r*: the smallest rank within 2% of the dense head's loss
# r* (issue 18): the smallest rank within TOL_CHAR nats per character of the protocol-(a)
# rank-d head (converted to nats per token through each V's tokenizer: ``tolerance``)
TOL_CHAR = 0.005
W_LEVEL = 0.6  # r_0.6: the smallest k with W-error(k) <= 0.6


@dataclasses.dataclass(frozen=True)
class Knobs:
  vocabs: tuple  # vocabulary sizes V (one sentencepiece tokenizer and one sweep each)
  plan: hr.Knobs | None  # the sweep at every V (None: no training, the bigram-n study only)
  ngram: NgramKnobs | None = None  # the exact bigram r*(V) beside the trained one (None: off)
  bigram_n: BigramNKnobs | None = None  # the exact bigram r*(V, N) study (issue 33, item 3)
  # protocol (a)'s heads of every rank and head lr as ONE population of padded heads (one
  # compile per V; rank_sweep.Plan.head_population), and its trunk: the full run's "last"
  # step or its "best" validation checkpoint (rank_sweep.Plan.trunk)
  head_population: bool = False
  trunk: str = "last"
  # a time budget in seconds since the run began (0 = none): each run's remaining time is
  # projected after estimate_warmup + estimate_at steps, and a run that would overrun stops
  # cleanly, resumable (exit 75; budget.py)
  budget_s: float = 0.0
  estimate_at: int = 200
  estimate_warmup: int = 10


def _b(ranks, lrs) -> hr.Knobs:
  return hr.Knobs(ranks=ranks, lrs=lrs, protocols=("b",), head_lrs=())


# the gpu presets read token files (per V: DATA/V<V>/{train,val}.uint16.bin, run.token_overrides)
GPU_DATA = {"data.source": "tokens"}

# overrides: dotted Config overrides; data.options.vocab_size, the corpus and name are per V
PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite: head_rank's test trunk, two vocabularies (the smallest fit: two points;
    # sentencepiece needs V >= 89 on Shakespeare, whose text has 85 distinct characters)
    "test": Preset(hr.BASE, hr.PRESETS["test"].overrides,
                   Knobs(vocabs=(96, 128), plan=_b((1,), (3e-3, 3e-2)))),
    # Same model and LR grid as head_rank's quick preset: at V=96 the compiled steps are shared
    # through a persistent JAX compilation cache (as the tests set up).
    "quick": Preset(hr.BASE, hr.PRESETS["quick"].overrides,
                    Knobs(vocabs=(64, 96), plan=_b((1,), (3e-3, 3e-2)))),
    # issue 18: one d=64 trunk per V (protocol full, the dense head), then protocol (a) rank-r
    # heads on it, r* against the protocol-(a) r = d = 64 head at TOL_CHAR nats per character.
    # Session 10, on the 42-file development corpus (--data=DIR): 31 min 46 s on 2
    # quiet cores; r* = 48 at every V (uncensored), exact bigram r* 64, 64, 128, 128
    # (BUILD_NOTES "vocab_threshold"). Without --data it runs on the packaged 5-play sample.
    # Issue 33 adds head lr 3e-2 beside 1e-2 (reported side by side, head_lrs.py): twice the
    # 36 protocol-(a) head runs; that version has not been run on the CPU yet.
    "cpu": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-cpu", "train.steps": 600,
                                         "train.warmup_steps": 60}),
                  Knobs(vocabs=(256, 512, 1024, 2048),
                        # issue 33: a second head lr (3e-2) beside 1e-2, reported side by side
                        plan=hr.Knobs(ranks=(2, 4, 8, 12, 16, 24, 32, 48, 64), lrs=(3e-3,),
                                      head_lrs=(1e-2, 3e-2), head_steps=300,
                                      protocols=("a",)),
                        ngram=NgramKnobs(ranks=(4, 8, 16, 32, 64, 128), max_iter=40))),
    "tpu": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-tpu",
                                         "data.options.vocab_size": 8192,
                                         "model.d_model": 512, "model.n_layers": 6,
                                         "model.n_heads": 8, "model.max_len": 512,
                                         "train.steps": 20_000, "train.batch_size": 256,
                                         "train.seq_len": 512, "train.warmup_steps": 1000,
                                         "train.eval_batches": 32}),
                  Knobs(vocabs=(512, 1024, 2048, 4096, 8192, 16384, 32768),
                        plan=_b((8, 16, 32, 64, 128, 256), (3e-4, 1e-3, 3e-3)))),
    # issue 32, item 3 (one H200): the shipped token files of the Shakespeare corpus
    # (benchmarks/build_device_tokens.py; --data=device_tokens, a folder of V<V>/ with
    # train.uint16.bin, val.uint16.bin and tokenizer.model), a d=512, 6-layer trunk per V
    # (protocol full, evaluated and checkpointed every 200 steps; the trunk of protocol (a) is
    # its best validation checkpoint), then protocol (a) heads at ranks 16..512 x head lr
    # {1e-2, 3e-2} on the frozen trunk as ONE population of 20 padded heads per V (one
    # compile per V: sbjax.heads.padded_lowrank); r* against the rank-512 head at TOL_CHAR.
    # Computed in bfloat16 (parameters, softmax and loss float32), as saturation's gpu-planted:
    # in float32 (HIGHEST precision, ~40 TFLOP/s on an H200) its 19 PFLOP alone would take
    # ~8 min. Time: each run prints its estimate after 10 + 200 steps and stops cleanly (exit
    # 75, resumable by the same command) if it would end past 450 s (budget.py). H200 estimate
    # (XLA's flop count of each step program, BUILD_NOTES "Session 16"): 10.7 PFLOP of trunks
    # + 7.9 of heads (the frozen trunk's forward once per step for the 20 heads:
    # sbjax.train.population.shares_trunk; 28.7 when each head recomputed it) ~ 94 s at 20%
    # of the bf16 peak, plus 8 compiles (4 trunks, 4 head populations) and checkpoints:
    # ~4.5 min; not scaled down (over 8 min only below ~6% utilisation, where the budget stop
    # ends it and a second call resumes). Checkpoints are saved asynchronously, as saturation's
    # gpu presets do: 23.6 GiB in all (7 per trunk with AdamW; each head population's 20
    # members hold the frozen trunk at steps 0 and 400), ~53 s at the 450 MiB/s of a
    # synchronous orbax save measured on the CPU machine (BUILD_NOTES "Session 17"), so the
    # trunks' saves overlap their training. Evaluation: 4 batches of 64 windows (65,536
    # tokens), which the validation split of every V holds without repeating a window (the
    # shipped files have 398, 348, 308, 279 windows of 256 at V 1024..8192; 16 batches, as
    # before, cycled through them 2.6-3.7 times with uneven weights: the device rehearsal,
    # benchmarks/device_rehearsal.py, turns that warning into an error).
    "gpu": Preset(hr.BASE, {**hr.overrides({**GPU_DATA, "name": "vocab_threshold-gpu",
                                            "model.d_model": 512, "model.n_layers": 6,
                                            "model.n_heads": 8, "model.max_len": 256,
                                            "train.steps": 1200, "train.batch_size": 64,
                                            "train.seq_len": 256, "train.warmup_steps": 100,
                                            "train.eval_batches": 4,
                                            "model.dtype": "bfloat16"}),
                            "train.eval_every": 200, "train.ckpt_every": 200,
                            "train.async_checkpoint": True},
                  Knobs(vocabs=(1024, 2048, 4096, 8192),
                        plan=hr.Knobs(ranks=(16, 32, 48, 64, 96, 128, 192, 256, 384, 512),
                                      lrs=(1e-3,), head_lrs=(1e-2, 3e-2), head_steps=400,
                                      protocols=("a",)),
                        head_population=True, trunk="best", budget_s=450.0, estimate_at=200)),
    # its test-size twin (the suite): head_rank's test trunk (d = 4) on token files at V 96 and
    # 128 (evaluated and checkpointed every 3 of its 6 steps), protocol (a) heads at ranks 2
    # and 4 (= d, the reference) x the two head lrs as one padded population; the estimate
    # after 1 + 2 steps, a budget no run reaches
    "gpu-test": Preset(hr.BASE, {**hr.PRESETS["test"].overrides, **GPU_DATA,
                                 "train.eval_every": 3, "train.ckpt_every": 3,
                                 "train.async_checkpoint": True},
                       Knobs(vocabs=(96, 128),
                             plan=hr.Knobs(ranks=(2, 4), lrs=(3e-3,), head_lrs=(1e-2, 3e-2),
                                           head_steps=4, protocols=("a",)),
                             head_population=True, trunk="best", budget_s=3600.0,
                             estimate_at=2, estimate_warmup=1)),
    # issue 33, item 3: the exact bigram r*(V, N), no training. V in {256, 1024, 2048} x the
    # nested data fractions {1/4, 1/2, 1} of the train tokens, each rank fitted to gtol 1e-5,
    # r* by a galloping search on a half-octave grid (sbjax/studies/bigram_rstar.py) from the
    # previous fraction's r*. Sized to the 40 min of CPU on 2 shared cores (session
    # 14, measured: fits to 1e-5 took 500-1290 L-BFGS iterations at V = 256 and 1024, 2-7 s
    # and 13-47 s of CPU each; at V = 2048 one iteration costs ~0.09 s at r = 32, so the cap
    # of 1500 bounds a fit at ~2-4 min). A fit stopped by its cap is flagged unconverged
    # (gradient norm, iterations, last-100-iteration drift) in the CSVs and the paragraph.
    "cpu-bigram-n": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-bigram-n"}),
                           Knobs(vocabs=(256, 1024, 2048), plan=None,
                                 bigram_n=BigramNKnobs(fractions=(0.25, 0.5, 1.0),
                                                       grid=(16, 24, 32, 48, 64, 96, 128,
                                                             192, 256),
                                                       max_iters=(3000, 1500, 1500)))),
    # its test size (the suite, seconds): two small V on a generated corpus, two fractions
    "test-bigram-n": Preset(hr.BASE, hr.PRESETS["test"].overrides,
                            Knobs(vocabs=(96, 128), plan=None,
                                  bigram_n=BigramNKnobs(fractions=(0.5, 1.0), grid=(2, 4, 8, 16),
                                                        max_iters=(300, 300), guess=4,
                                                        block=256))),
}
VOCABS = {name: p.knobs.vocabs for name, p in PRESETS.items()}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "vocab_threshold")
