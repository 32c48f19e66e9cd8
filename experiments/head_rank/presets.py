"""The head-rank sweep's presets: config overrides (trunk, data, training) of the sbjax preset
``tiny`` plus the knobs of ``sbjax.studies.rank_sweep.Plan`` (ranks, LR grids, mos heads).
They live in ``sbjax.studies.head_rank`` (werror_loss, vocab_threshold and target_rank use
them too)."""

from sbjax.studies.head_rank import BASE, PRESETS, TEXT_DATA, Knobs, get_preset, overrides
from sbjax.studies.presets import Preset

__all__ = ["BASE", "PRESETS", "TEXT_DATA", "Knobs", "Preset", "get_preset", "overrides"]
