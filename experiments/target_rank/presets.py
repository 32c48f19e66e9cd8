"""target_rank's presets: a data section over ``tiny``'s (data.options.vocab_size and the
corpus are set per V) and the knobs of the count matrices and their spectra."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset


@dataclasses.dataclass(frozen=True)
class Knobs:
  vocab_sizes: tuple  # one sentencepiece tokenizer per V
  ns: tuple = (1, 2, 3, 4)  # context lengths
  min_count: int = 10  # contexts seen fewer times are dropped
  k: float = 0.1  # add-k smoothing constant
  max_d: int = 4096  # dims are 1, 2, 4, ... up to min(C, V, max_d)
  d_ref: int = 64  # the d of the report's table
  variants: tuple = ("raw", "addk", "logp", "logp_centered")
  gram_max_dim: int = 4096  # larger min(C, V): randomized SVD with these two
  oversample: int = 20
  n_iter: int = 6


TEXT, TFDS = {"data.source": "text"}, {"data.source": "tfds", "data.options.name": "lm1b",
                                        "data.options.max_docs": 2_000_000}

PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite: one small vocabulary (128 pieces: Shakespeare has 85 characters), n = 1, 2
    "test": Preset("tiny", TEXT, Knobs(vocab_sizes=(128,), ns=(1, 2), min_count=3, max_d=64,
                                       d_ref=16)),
    "quick": Preset("tiny", TEXT, Knobs(vocab_sizes=(64, 128), ns=(1, 2, 3), min_count=3,
                                        max_d=128, d_ref=16)),
    "cpu": Preset("tiny", TEXT, Knobs(vocab_sizes=(512, 1024, 2048, 4096))),
    # the paper's scale: GPT-2/Pythia-sized vocabularies on a large corpus (randomized SVD)
    "tpu": Preset("tiny", TFDS, Knobs(vocab_sizes=(8192, 16384, 32768, 50304), min_count=20,
                                      max_d=2048, d_ref=256)),
}
