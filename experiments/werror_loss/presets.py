"""werror_loss's presets: head_rank's (the sweep it reads, or trains when it finds none), with
the W-error threshold and the loss tolerance."""

from __future__ import annotations

import dataclasses

from sbjax.experiment import Preset
from sbjax.studies.head_rank import Knobs as SweepKnobs

from ..head_rank.presets import PRESETS as SWEEPS


@dataclasses.dataclass(frozen=True)
class Knobs(SweepKnobs):
  threshold: float = 0.6  # Godey et al. (2024), Fig. 8: the W-error level
  tol: float = 0.02  # r* = the smallest rank with loss <= (1 + tol) * full-rank loss


PRESETS: dict[str, Preset[Knobs]] = {
    name: Preset(p.base, p.overrides, Knobs(**dataclasses.asdict(p.knobs)))
    for name, p in SWEEPS.items()}
