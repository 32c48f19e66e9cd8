"""werror_loss's presets: those of the head-rank sweep it reads (and trains first, with the same
preset, when it is missing), plus the W-error threshold and the loss tolerance."""

from __future__ import annotations

import dataclasses

from ..head_rank.presets import PRESETS as HEAD_RANK_PRESETS
from ..shared import pick_preset

THRESHOLD = 0.6  # Godey et al. (2024), Fig. 8
TOL = 0.02  # "within 2% of the full-rank loss"


@dataclasses.dataclass(frozen=True)
class Knobs:
  threshold: float = THRESHOLD  # the paper's W-error level
  tol: float = TOL  # r* = the smallest rank with loss <= (1 + tol) * full-rank loss


@dataclasses.dataclass(frozen=True)
class Preset:
  base: str  # the head-rank sweep's sbjax preset
  overrides: dict  # the head-rank sweep's overrides
  knobs: Knobs


PRESETS: dict[str, Preset] = {name: Preset(p.base, p.overrides, Knobs())
                              for name, p in HEAD_RANK_PRESETS.items()}


def get_preset(name) -> Preset:
  return pick_preset(PRESETS, name, "werror_loss")
