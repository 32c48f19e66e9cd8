"""target_rank's presets: the data config overrides (a text corpus, or a TFDS dataset for the
tpu preset) plus the knobs of the count matrices and their spectra."""

from __future__ import annotations

import dataclasses

from sbjax.studies.head_rank import BASE, TEXT_DATA
from sbjax.studies.presets import Preset, pick_preset


@dataclasses.dataclass(frozen=True)
class Knobs:
  vocab_sizes: tuple  # one sentencepiece tokenizer per V
  ns: tuple = (1, 2, 3, 4)  # context lengths
  min_count: int = 10  # contexts seen fewer times are dropped
  k: float = 0.1  # add-k smoothing constant
  max_d: int = 4096  # dims are 1, 2, 4, ... up to min(C, V, max_d)
  d_ref: int = 64  # the d of the report's table
  variants: tuple = ("raw", "addk", "logp", "logp_centered")
  gram_max_dim: int = 4096
  oversample: int = 20
  n_iter: int = 6


TFDS = {**TEXT_DATA, "data.source": "tfds", "data.options.name": "lm1b",
        "data.options.max_docs": 2_000_000}

# base: only its data section is used (nothing is trained); overrides: dotted data overrides
# (data.options.vocab_size and the corpus are set per V)
PRESETS: dict[str, Preset[Knobs]] = {
    # the test suite: one small vocabulary (128 pieces: Shakespeare has 85 characters), n = 1, 2
    "test": Preset(BASE, TEXT_DATA, Knobs(vocab_sizes=(128,), ns=(1, 2), min_count=3, max_d=64,
                                          d_ref=16)),
    "quick": Preset(BASE, TEXT_DATA, Knobs(vocab_sizes=(64, 128), ns=(1, 2, 3), min_count=3,
                                           max_d=128, d_ref=16)),
    "cpu": Preset(BASE, TEXT_DATA, Knobs(vocab_sizes=(512, 1024, 2048, 4096))),
    # the paper's scale: GPT-2/Pythia-sized vocabularies on a large corpus; spectra of
    # min(C, V) > gram_max_dim come from randomized SVD (top max_d values)
    "tpu": Preset(BASE, TFDS, Knobs(vocab_sizes=(8192, 16384, 32768, 50304), min_count=20,
                                    max_d=2048, d_ref=256)),
}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "target_rank")


def fields(p: Preset) -> dict:
  """The preset as one flat record (target_rank_meta.json's preset_fields; the part keys): the
  knobs and the data fields of its overrides (their defaults where it sets none; the corpus is
  set per run)."""
  o = p.overrides
  return {**dataclasses.asdict(p.knobs), "source": o["data.source"],
          "tfds_name": o.get("data.options.name", ""),
          "max_docs": o.get("data.options.max_docs", 0)}
