"""Part 2 in (language, objective) cells (issue 33 item 5, the ``*-mos-seeds`` presets): per
cell, MoS against the parameter-matched lowrank head and MoS at the lowrank head's FLOPs
against it, each arm at the lr chosen on the selection stream (``mix_stats.arms``), with a
Welch interval over seeds, from planted_mix.csv alone.

The comparison of arms a (MoS) and b (lowrank) is ``sbjax.studies.welch.welch`` of their
reported gaps over seeds: diff = mean(g_b) − mean(g_a) (> 0: MoS is closer to H) with its 95%
Welch interval; the claim "MoS beats the lowrank head" is **supported** when the interval lies
above 0, **refuted** when it lies below 0, **undecided** otherwise.
"""

from __future__ import annotations

from .mix_stats import arms
from sbjax.studies.welch import LEVEL, welch

__all__ = ["LEVEL", "cells", "cell_summary", "welch"]


def cells(rows) -> list[tuple]:
  """[((lang, objective), rows)] in order of first appearance (rows with a ``lang`` column)."""
  out: dict = {}
  for r in rows:
    out.setdefault((str(r["lang"]), str(r["objective"])), []).append(r)
  return list(out.items())


def _by_run(rows) -> dict:
  """{run label (mos, lowrank, mos-flops, ...): the arm's record at its selected lr}."""
  run_of = {str(r["arm"]): str(r["run"]) for r in rows}
  return {run_of[a["arm"]]: {**a, "head_flops": _first(rows, a["arm"], "head_flops")}
          for a in arms(rows)}


def _first(rows, arm: str, col: str):
  return next(int(r[col]) for r in rows if str(r["arm"]) == arm)


def cell_summary(rows) -> dict:
  """One cell's arms (``_by_run``) and its two comparisons: ``params`` (mos vs the matched
  lowrank) and ``flops`` (mos-flops vs the same lowrank head), each ``welch`` of the reported
  gaps at the selected lrs (None when an arm is missing)."""
  by = _by_run(rows)
  low = by.get("lowrank")

  def vs(run):
    return None if run not in by or low is None else welch(by[run]["gaps"], low["gaps"])
  return {"arms": by, "params": vs("mos"), "flops": vs("mos-flops")}
