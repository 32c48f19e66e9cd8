"""vocab_threshold's presets: a head-rank sweep (``sbjax.studies.head_rank``) at each vocabulary
size V (data.options.vocab_size and the name are set per V), the exact bigram r*(V) beside it
(``ngram``), or the exact bigram r*(V, N) study alone (``bigram_n``)."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset
from sbjax.studies import head_rank as hr

from .bigram import BigramNKnobs, NgramKnobs
from .rule import Rule

TOL_CHAR = 0.005  # r*'s tolerance in nats per character (rstar.py)
W_LEVEL = 0.6  # r_0.6: the smallest k with W-error(k) <= 0.6 (of the centred dense head)


@dataclasses.dataclass(frozen=True)
class Knobs:
  vocabs: tuple  # vocabulary sizes V (one sentencepiece tokenizer and one sweep each)
  plan: hr.Knobs | None  # the sweep at every V (None: no training, the bigram-n study only)
  ngram: NgramKnobs | None = None  # the exact bigram r*(V) beside the trained one
  bigram_n: BigramNKnobs | None = None  # the exact bigram r*(V, N) study
  reseed: tuple = ()  # the V whose sweep runs again on a second trunk seed (the start movement)
  rule: Rule = Rule()  # the pre-registered rule (rule.py)


def _b(ranks, lrs) -> hr.Knobs:
  return hr.Knobs(ranks=ranks, lrs=lrs, protocols=("b",), head_lrs=())


BIGRAM_N_RULE = Rule(claim="at fixed V the bigram's r* moves with the data size",
                     over="fraction")
TEST = hr.overrides({**hr.TINY, "name": "head_rank-test", "train.steps": 6,
                     "train.eval_batches": 1})
# the gpu presets read token files (per V: DATA/V<V>/{train,val}.uint16.bin, tokenizer.model)
GPU_DATA = {"data.source": "tokens"}

PRESETS: dict[str, Preset[Knobs]] = {
    # head_rank's test trunk at two V (sentencepiece needs V >= 89 on Shakespeare)
    "test": Preset(hr.BASE, TEST, Knobs(vocabs=(96, 128), plan=_b((1,), (3e-3, 3e-2)))),
    # the model and LR grid of head_rank's quick preset
    "quick": Preset(hr.BASE, hr.overrides({**hr.TINY, "name": "head_rank-quick",
                                           "train.steps": 12, "train.eval_batches": 2}),
                    Knobs(vocabs=(64, 96), plan=_b((1,), (3e-3, 3e-2)))),
    # one d=64 trunk per V, protocol (a) heads at two head lrs, r* against the (a) r = d head
    "cpu": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-cpu", "train.steps": 600,
                                         "train.warmup_steps": 60}),
                  Knobs(vocabs=(256, 512, 1024, 2048),
                        plan=hr.Knobs(ranks=(2, 4, 8, 12, 16, 24, 32, 48, 64), lrs=(3e-3,),
                                      head_lrs=(1e-2, 3e-2), head_steps=300,
                                      protocols=("a",)),
                        ngram=NgramKnobs(ranks=(4, 8, 16, 32, 64, 128), max_iter=40))),
    # E5: is the trained r*(V) a constant when the trunk does not bind? A d=128 trunk per V,
    # protocol (a) heads of rank 16..128 (the reference: rank 128) at their best head lr, a
    # second trunk seed at V = 1024 (the rule's start movement); 40 eval batches: 1280 windows
    # of 64 tokens, as many as V = 2048's validation split holds
    "cpu-e5": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-cpu-e5",
                                            "model.d_model": 128, "train.steps": 1200,
                                            "train.warmup_steps": 100,
                                            "train.eval_batches": 40}),
                     Knobs(vocabs=(256, 1024, 2048), reseed=(1024,),
                           plan=hr.Knobs(ranks=(16, 24, 32, 48, 64, 96, 128), lrs=(3e-3,),
                                         head_lrs=(3e-3, 1e-2, 3e-2), head_steps=300,
                                         protocols=("a",)))),
    # its test-size twin: the test trunk (d = 4) at V = 128 with a second trunk seed, heads of
    # rank 2 and 4 at two head lrs as one padded population (gpu-test's programs); blocks of
    # 32 tokens (2 of the 16-token windows)
    "test-e5": Preset(hr.BASE, {**TEST, "train.eval_batches": 4},
                      Knobs(vocabs=(128,), reseed=(128,), rule=Rule(block_tokens=32),
                            plan=hr.Knobs(ranks=(2, 4), lrs=(3e-3,), head_lrs=(1e-2, 3e-2),
                                          head_steps=4, protocols=("a",),
                                          head_population=True))),
    "tpu": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-tpu",
                                         "data.options.vocab_size": 8192,
                                         "model.d_model": 512, "model.n_layers": 6,
                                         "model.n_heads": 8, "model.max_len": 512,
                                         "train.steps": 20_000, "train.batch_size": 256,
                                         "train.seq_len": 512, "train.warmup_steps": 1000,
                                         "train.eval_batches": 32}),
                  Knobs(vocabs=(512, 1024, 2048, 4096, 8192, 16384, 32768),
                        plan=_b((8, 16, 32, 64, 128, 256), (3e-4, 1e-3, 3e-3)))),
    # one H200 (docs/operations.md), token files: a d=512, 6-layer bfloat16 trunk per V (its
    # best validation checkpoint), then protocol (a) heads at ranks 16..512 x two head lrs as
    # ONE population of padded heads per V (sbjax.heads.padded_lowrank)
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
                                      protocols=("a",), head_population=True, trunk="best"))),
    # its test-size twin: the test trunk (d = 4) on token files at V = 128
    "gpu-test": Preset(hr.BASE, {**TEST, **GPU_DATA, "train.eval_every": 3,
                                 "train.ckpt_every": 3, "train.async_checkpoint": True},
                       Knobs(vocabs=(128,),
                             plan=hr.Knobs(ranks=(2, 4), lrs=(3e-3,), head_lrs=(1e-2, 3e-2),
                                           head_steps=4, protocols=("a",),
                                           head_population=True, trunk="best"))),
    # the exact bigram r*(V, N), no training: V in {256, 1024, 2048} x the nested data
    # fractions {1/4, 1/2, 1}
    "cpu-bigram-n": Preset(hr.BASE, hr.overrides({"name": "vocab_threshold-bigram-n"}),
                           Knobs(vocabs=(256, 1024, 2048), plan=None,
                                 bigram_n=BigramNKnobs(fractions=(0.25, 0.5, 1.0),
                                                       grid=(16, 24, 32, 48, 64, 96, 128,
                                                             192, 256),
                                                       max_iters=(3000, 1500, 1500)),
                                 rule=BIGRAM_N_RULE)),
    # its test size (the suite, seconds): two small V, two fractions
    "test-bigram-n": Preset(hr.BASE, TEST,
                            Knobs(vocabs=(96, 128), plan=None,
                                  bigram_n=BigramNKnobs(fractions=(0.5, 1.0), grid=(2, 4, 8, 16),
                                                        max_iters=(300, 300), guess=4,
                                                        block=256),
                                  rule=dataclasses.replace(BIGRAM_N_RULE, block_tokens=64))),
}
