"""The budget stop of the collapse device presets (issue 32): the gpu-grid twin with two grid
groups (L1-d8, L1-d16; 3 runs each) run four times into one folder as the CLI does (``run``,
then ``write_section``, also after a stop), with the real budget clock and hook, its budget
spent by the test:

1. once the first group starts, so its time estimate stops it (``OverBudget``): no group
   finished, and section.md says so, with the estimate and how to resume (no tables, no
   figure);
2. once the first group has finished (its OUT/groups/ record exists), so the second is refused
   before it starts, and section.md is the report of the 3 finished runs, marked partial, with
   the tables of a whole run's code over them (n = 3: no Fisher interval);
3. not at all, but the call is cut off (an exception the run does not catch, as a kill leaves
   it: no chance to write) before the second group: section.md (as device_science.sh writes it
   after a cut-off) says the run did not reach its end, over what the call's record holds;
4. not at all: the run ends, section.md is the whole report, and collapse_meta.json's
   ``runs`` holds the four calls, the first three kept whole."""

import dataclasses
import importlib
import json

import numpy as np
import pytest

from experiments.collapse import budget
from experiments.collapse.presets import get_preset
from experiments.collapse.report import write_section
from experiments.shared import read_rows
from tests._corpus import chain_tokens

run_mod = importlib.import_module("experiments.collapse.run")  # (the package's run: a function)
BASE = get_preset("gpu-grid-test")
# the twin with a second width: two groups, the stop between them
PRESET = dataclasses.replace(BASE, knobs=dataclasses.replace(BASE.knobs, widths=(8, 16)))


class _SpentOnceStarted(budget.Clock):
  """The real clock, its budget spent once a group starts: that group's estimate stops it."""

  def check_start(self, name: str, member_tokens: int) -> None:
    super().check_start(name, member_tokens)
    self.budget_s = 1e-6


def _spent_after(record):
  class SpentAfter(budget.Clock):
    """The real clock, reading the whole budget as spent once ``record`` exists."""

    def elapsed(self) -> float:
      return self.budget_s if record.exists() else super().elapsed()

  return SpentAfter


class _CutOff(BaseException):
  """What a kill does to the run: nothing of it runs after this point."""


class _CutOffBeforeStart(budget.Clock):
  def check_start(self, name: str, member_tokens: int) -> None:
    raise _CutOff(name)


def _call(out, data, clock) -> str | None:
  """One call as ``python -m experiments.collapse`` makes it: the run, then section.md (also
  after a stop); the stop's text (None: the run ended)."""
  stop = None
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(run_mod, "Clock", clock)  # the run's clock
    try:
      run_mod.run(out, PRESET, data=data, verbose=False)
    except budget.OverBudget as e:
      stop = str(e)
    except _CutOff:
      stop = "cut off"
  write_section(out)
  return stop


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
  """The four calls into one folder: (out, [(stop text, section.md, meta, figure drawn?,
  collapse_r2.csv's rows or None) per call])."""
  tmp = tmp_path_factory.mktemp("collapse_budget")
  v = BASE.overrides["data.options.vocab_size"]
  chain_tokens(tmp / "train.uint16.bin", 4096, v, 1)
  chain_tokens(tmp / "val.uint16.bin", 1024, v, 2)
  data, out = f"{tmp / 'train.uint16.bin'},{tmp / 'val.uint16.bin'}", tmp / "out"
  seen = []
  for clock in (_SpentOnceStarted, _spent_after(out / "groups" / "L1-d8.json"),
                _CutOffBeforeStart, budget.Clock):
    stop = _call(out, data, clock)
    r2 = out / "collapse_r2.csv"
    seen.append((stop, (out / "section.md").read_text(),
                 json.loads((out / "collapse_meta.json").read_text()),
                 (out / "fig_collapse_vs_loss.png").exists(),
                 read_rows(r2) if r2.exists() else None))
  return out, seen


def test_a_stop_before_any_group_finished_says_so(calls):
  _, seen = calls
  stop, md, meta, figure, r2 = seen[0]
  assert stop == meta["stopped"]
  assert stop.startswith("group L1-d8 would end at ~")  # its estimate stopped it
  assert "past the 1e-06 s budget: stopped after 14 steps" in meta["stopped"]
  assert meta["not_run"] == ["L1-d8", "L1-d16"] and meta["trained"] == []
  assert list(meta["estimates"]) == ["L1-d8"] and meta["estimates"]["L1-d8"]["steps"] == 24
  assert [r["stopped"] for r in meta["runs"]] == [meta["stopped"]]
  assert md.startswith("## Linguistic collapse (Wu & Papyan 2024)\n\n**The run stopped at its "
                       "time budget (300 s)**: group L1-d8 would end at ~")
  assert "Groups finished: none; not finished: L1-d8 (3 runs), L1-d16 (3 runs)." in md
  assert "No group finished, so this section has no tables and no figure." in md
  assert "The budget clock's estimates in the last call: L1-d8: 24 steps at " in md
  assert "Rerun the same command with the same --out to resume" in md
  assert "| metric |" not in md and "![" not in md and not figure and r2 is None


def test_a_stop_after_the_first_group_reports_it_as_partial(calls):
  _, seen = calls
  stop, md, meta, figure, _ = seen[1]
  assert stop == meta["stopped"] and figure
  assert meta["trained"] == ["L1-d8"] and meta["not_run"] == ["L1-d16"]
  assert meta["stopped"].startswith("group L1-d16 needs ~") and "stopped before it" in \
      meta["stopped"]
  assert len(meta["runs"]) == 2 and meta["runs"][0] == seen[0][2]["runs"][0]
  assert "Groups finished: L1-d8 (3 runs); not finished: L1-d16 (3 runs)." in md
  assert "This folder was written by 2 calls of the command: call 1 (" in md
  assert "**Partial: over 3 of 6 grid runs** — R² of every metric vs validation loss" in md
  assert "**Partial: over 3 of 6 grid runs** — the run stopped before its end" in md
  # no verdict over the partial set: neither the table columns nor the sentences
  for word in ("point verdict", "supported", "refuted", "agrees", "undecided"):
    assert word not in md, word
  assert "3 grid runs, 6 snapshots" in md


def test_the_partial_tables_are_over_the_finished_runs(calls):
  """collapse_r2.csv after the second stop is over the 3 runs of the finished group: each
  metric's r is numpy's Pearson r of the group's own record (OUT/groups/L1-d8.json, last
  snapshots) and, at n = 3, there is no Fisher interval (the section shows '–')."""
  out, seen = calls
  md, r2 = seen[1][1], seen[1][4]
  rows = json.loads((out / "groups" / "L1-d8.json").read_text())["rows"]
  checked = 0
  for r in (r for r in r2 if r["points"] == "last"):
    sel = [x for x in rows if x["last_snapshot"] == 1 and x["min_count"] == int(r["min_count"])]
    x = np.asarray([s[r["metric"]] for s in sel], float)
    y = np.asarray([s["val_loss"] for s in sel], float)
    assert int(r["n"]) == np.isfinite(x).sum() <= 3 and not np.isfinite(float(r["ci_lo"]))
    if np.isfinite(x).all() and np.std(x) > 0:
      assert float(r["pearson_r"]) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)
      checked += 1
  assert checked >= 20  # most of the 17 metrics x 2 min_counts
  line = next(s for s in md.splitlines() if s.startswith("| nc4_agreement | 20 | 3 |"))
  assert line.endswith("| – | – | – |")  # the interval table: no CI of r, no partial r


def test_a_call_cut_off_leaves_a_record_and_a_partial_report(calls):
  _, seen = calls
  stop, md, meta, figure, _ = seen[2]
  assert stop == "cut off" and meta["stopped"] is None and figure
  assert meta["trained"] == [] and meta["not_run"] == ["L1-d16"]  # as at its last write
  assert meta["runs"][:2] == seen[1][2]["runs"] and len(meta["runs"]) == 3
  assert md.startswith("## Linguistic collapse (Wu & Papyan 2024)\n\n**The run did not reach "
                       "its end** (no budget stop was recorded: it was cut off or failed). "
                       "Groups finished: L1-d8 (3 runs); not finished: L1-d16 (3 runs).")
  assert "call 3 (" in md and "training finished: none): ended with L1-d16 not run." in md
  assert "**Partial: over 3 of 6 grid runs** — the run stopped before its end" in md


def test_the_rerun_finishes_with_the_whole_report_and_every_call_kept(calls):
  out, seen = calls
  stop, md, meta, figure, _ = seen[3]
  assert stop is None and meta["stopped"] is None and meta["not_run"] == []
  assert meta["trained"] == ["L1-d16"]
  assert len(meta["runs"]) == 4
  assert meta["runs"][:3] == seen[2][2]["runs"]  # the first three calls kept whole
  assert meta["runs"][3] == {k: meta[k] for k in run_mod.CALL_KEYS}
  assert all(r["ended"] <= s["started"] for r, s in zip(meta["runs"], meta["runs"][1:]))
  assert "stopped at its time budget" not in md and "Partial" not in md
  assert "6 grid runs, 12 snapshots" in md and "point verdict" in md
  assert "This folder was written by 4 calls of the command:" in md and "ran to its end" in md
  r2 = [r for r in read_rows(out / "collapse_r2.csv") if r["points"] == "last"]
  assert {int(r["n"]) for r in r2 if r["metric"] == "nc4_agreement"} == {6}
  assert figure
