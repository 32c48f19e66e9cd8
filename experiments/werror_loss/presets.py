"""werror_loss's presets: those of the head-rank sweep it reads (and trains first, with the same
preset, when it is missing), plus the W-error threshold and the loss tolerance."""

from __future__ import annotations

import dataclasses

from sbjax.studies.head_rank import PRESETS as HEAD_RANK_PRESETS
from sbjax.studies.presets import Preset, pick_preset

from sbjax.studies.werror import THRESHOLD, TOL


@dataclasses.dataclass(frozen=True)
class Knobs:
  threshold: float = THRESHOLD  # the paper's W-error level
  tol: float = TOL  # r* = the smallest rank with loss <= (1 + tol) * full-rank loss


# the head-rank sweep's base and overrides, with this experiment's knobs
PRESETS: dict[str, Preset[Knobs]] = {name: Preset(p.base, p.overrides, Knobs())
                              for name, p in HEAD_RANK_PRESETS.items()}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "werror_loss")
