"""One ``Preset`` type for every experiment: an sbjax named config, dotted Config overrides (the
one override path, ``sbjax.overrides``) and the experiment's knobs (values that are not Config
fields), plus ``pick_preset``: a preset by name, or one clear error."""

from __future__ import annotations

import dataclasses
from typing import Generic, Mapping, TypeVar

K = TypeVar("K")


@dataclasses.dataclass(frozen=True)
class Preset(Generic[K]):
  base: str  # an sbjax named config (sbjax/configs.py) or family (collapse: f"{base}-L..-d..")
  overrides: dict  # dotted Config overrides (sbjax.overrides.apply)
  knobs: K  # the experiment's own settings (not Config fields)


def pick_preset(presets: Mapping, name, experiment: str):
  """``presets[name]`` of an experiment's PRESETS (a Preset object passes through), or one
  clear error naming the experiment and its presets."""
  if not isinstance(name, str):
    return name
  if name not in presets:
    raise ValueError(f"unknown {experiment} preset {name!r}; known: {', '.join(presets)}")
  return presets[name]
