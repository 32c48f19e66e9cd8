"""The flags of an experiment's series mode (``--series=WORKDIR``: analyse the checkpoints of
an imported series or a run on given data, no training), shared by ``experiments.collapse``
and ``experiments.saturation``: ``--series`` here, the data flags (``--tokens``,
``--data.KEY=VALUE``, ``--allow_duplicates``, ``--steps``, ``--eval_sequences``) are
``experiments.data_flags``' (the same flag objects as ``experiments.analyze``'s)."""

from __future__ import annotations

from absl import flags

from .data_flags import ALLOW_DUP, DATA, STEPS, TOKENS, data_dot_flags, steps
from .data_flags import eval_sequences as _eval_sequences

__all__ = ["SERIES", "TOKENS", "DATA", "ALLOW_DUP", "STEPS", "data_dot_flags", "steps",
           "eval_sequences", "SERIES_EVAL_SEQUENCES"]

SERIES = flags.DEFINE_string("series", "", "analyse the checkpoints of this workdir (an imported "
                             "series, experiments.convert --from_hf, or a run) instead of "
                             "running the preset; needs --tokens or --data.* for an import")
SERIES_EVAL_SEQUENCES = 64  # --eval_sequences of a series mode when not given


def eval_sequences() -> int:
  return _eval_sequences(SERIES_EVAL_SEQUENCES)
