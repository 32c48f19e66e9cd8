"""The flags that say which data (and which checkpoints) a checkpoint analysis measures:
``--tokens``, ``--data.KEY=VALUE`` (absl flag ``--data_override``), ``--allow_duplicates``,
``--steps`` and ``--eval_sequences``. Defined once here and imported by every command that
takes them (``experiments.analyze``, the series modes of ``experiments.collapse`` and
``experiments.saturation`` via ``experiments.series_flags``),
so those modules can be imported in one process (absl flag names are global)."""

from __future__ import annotations

from absl import flags

from .common import dotted_flags
from .number_flags import define_number_list

TOKENS = flags.DEFINE_string("tokens", "", "measure on these tokens: an integer .npy [n, T+1] "
                             "(rows set T) or a flat .bin named by its dtype (x.uint16.bin), "
                             "ids in the model's vocabulary; needed for an imported series "
                             "(experiments.convert --from_hf)")
DATA = flags.DEFINE_multi_string("data_override", [], "a data override KEY=VALUE (repeatable), "
                                 "usually spelled --data.KEY=VALUE, e.g. --data.source=text "
                                 "--data.path=DIR --data.tokenizer=tokenizer.json")
ALLOW_DUP = flags.DEFINE_bool("allow_duplicates", False, "analyse revisions of an imported "
                              "series that duplicate another's weights (import.json "
                              "duplicate_of); refused otherwise")
STEPS = define_number_list("steps", [], "analyse only these checkpoint steps (default: all)",
                           example="0,100,1000")
EVAL_SEQ = flags.DEFINE_integer("eval_sequences", None, "validation windows for loss, "
                                "anisotropy and NC4 (default: 128 for analyze, 64 for the "
                                "series modes of collapse and saturation)")


def data_dot_flags(argv: list) -> list:
  """``--data.KEY=VALUE`` as ``--data_override=KEY=VALUE`` (absl has no dotted flag names)."""
  return dotted_flags(argv, "data", "data_override")


def steps() -> tuple:
  return tuple(STEPS.value)


def eval_sequences(default: int) -> int:
  """``--eval_sequences``, or the command's ``default`` when it is not given."""
  return default if EVAL_SEQ.value is None else EVAL_SEQ.value
