"""An experiment as a declaration: its presets, its groups of member configs, a per-checkpoint
``measure``, its tables, figures and report section. ``sbjax.experiment.runner.run`` does the
rest (the output lock, training each group once, measuring every checkpoint once, the CSVs).

A group is the N member configs of one run (``sbjax.train.train``: N = 1 is a plain run, N > 1
members trained in one vmapped step); its workdir is ``OUT/runs/<name>`` (N = 1) or
``OUT/runs/<name>/member_<i>``. ``plan(ctx)`` yields the groups in training order; it may read
the results of the groups already trained (``ctx.results``), so a later group can depend on an
earlier one (a frozen trunk taken from the best dense run).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

K = TypeVar("K")


@dataclasses.dataclass(frozen=True)
class Preset(Generic[K]):
  """A named config (``sbjax.configs``), dotted Config overrides and the experiment's knobs
  (the settings that are not Config fields, including its pre-registered decision rule)."""

  base: str
  overrides: dict
  knobs: K


@dataclasses.dataclass(frozen=True)
class Group:
  """The member configs of one run. ``labels[i]``: the columns that name member i in the
  tables (an arm, a seed, a learning rate); ``dataset``: one dataset (every member sees the
  same batches), one per member, or None (built from the configs, shared between groups with
  the same data)."""

  name: str
  configs: tuple
  labels: tuple = ()
  dataset: Any = None

  def __post_init__(self):
    object.__setattr__(self, "configs", tuple(self.configs))
    labels = tuple(self.labels) or tuple({} for _ in self.configs)
    if len(labels) != len(self.configs):
      raise ValueError(f"group {self.name}: {len(labels)} labels for {len(self.configs)} members")
    object.__setattr__(self, "labels", labels)


# measure(ctx, group, member index, steps, params of those steps) -> one row per step
Measure = Callable[[Any, Group, int, list, list], list]


@dataclasses.dataclass(frozen=True)
class Experiment:
  """What an experiment is. ``measure_steps``: the checkpoints ``measure`` sees ("final": the
  last one, "all": every one), ``measure_chunk`` of them per call (a vmapped measurement);
  ``version``: bump it when ``measure`` changes what it computes (cached rows are recomputed).
  ``tables(ctx)`` writes the experiment's own CSV/JSON from ``OUT/runs.csv``,
  ``OUT/checkpoints.csv`` and its memos; ``figures(out)`` and ``report(out, rel) -> markdown`` (its
  figures under ``rel/``) read only the files in ``out``; ``reads_data``: whether ``--data`` means anything to it."""

  name: str
  presets: Mapping[str, Preset]
  plan: Callable[[Any], Iterable[Group]]
  measure: Measure | None = None
  measure_steps: str = "final"
  measure_chunk: int = 1
  version: int = 1
  tables: Callable[[Any], None] | None = None
  figures: Callable[[Any], None] | None = None
  report: Callable[[Any, str], str] | None = None
  reads_data: bool = True
  doc: str = ""

  def preset(self, name: str) -> Preset:
    if name not in self.presets:
      raise ValueError(f"unknown {self.name} preset {name!r}; known: {', '.join(self.presets)}")
    return self.presets[name]
