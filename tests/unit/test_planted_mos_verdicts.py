"""The planted MoS verdicts: lrs chosen on the reporting seeds give none; the rule's verdicts."""

import json
import math

import numpy as np
import pytest

from experiments import planted as exp
from experiments.common import read_rows, write_json, write_rows
from experiments.planted import stats
from experiments.planted.presets import FreshRule
from sbjax.studies.welch import welch

FLOOR_GAP = 0.0418


def _selection_cells(out):
  """cpu-mos-seeds-like cells at 200 steps: MoS 0.08 nats below the matched lowrank head on 5
  seeds, each arm's lr chosen among two on those same seeds."""
  rng, rows = np.random.default_rng(0), []
  for run, head, rank, params, fg, base in (("mos", "mos", 0, 2912, math.nan, 0.29),
                                            ("lowrank", "lowrank", 11, 2992, FLOOR_GAP, 0.37)):
    for lr in (0.1, 0.3):
      for s in range(5):
        g = base + (0.05 if lr == 0.3 else 0.0) + 0.01 * rng.standard_normal()
        rows.append({"label": f"{run}-lr{lr}-s{s}", "arm": f"mos-sampled-{run}", "seed": s,
                     "lr": lr, "head": head, "rank": rank, "head_params": params, "gap": g,
                     "floor_gap": fg, "sel_gap": g + 0.002 * rng.standard_normal(),
                     "lang": "mos", "objective": "sampled", "run": run})
  write_rows(out / exp.CSV_MIX, rows)
  write_json(out / exp.META, {"settings": {"mix": {"train.steps": 200}}})
  write_json(out / "summary.json", {"mix": stats.mix_summary(read_rows(out / exp.CSV_MIX))})
  return rows


def test_lr_chosen_on_the_reported_seeds_gives_no_verdict(tmp_path):
  rows = _selection_cells(tmp_path)
  gaps = {run: [r["gap"] for r in rows if r["run"] == run and r["lr"] == 0.1]
          for run in ("mos", "lowrank")}
  assert welch(gaps["mos"], gaps["lowrank"])["verdict"] == "supported"  # the old sentence
  text = exp.report(tmp_path)
  assert "**supported**" not in text and f"**{stats.SAME_SEEDS}**" in text
  steps = exp.PRESETS["cpu-e3"].knobs.mix["train.steps"]
  assert f"ran 200 steps, fewer than the {steps} of the exact-floor test" in text
  assert "| mos/sampled | mos | mos | 0 | 2912 | 0.1000 | selection | 5 |" in text
  summary = json.loads((tmp_path / "summary.json").read_text())["mix"]["mos/sampled"]
  assert summary["params"] == stats.SAME_SEEDS


@pytest.mark.parametrize("mos, low, want", [
    ([0.02] * 5, [0.045, 0.05], "supports"),
    ([0.05] * 5, [0.045], "refutes"),
    ([0.02] * 4 + [0.05], [0.045], "undecided"),  # not on every fresh seed
    ([0.02] * 4 + [math.nan], [0.045], "undecided"),  # a diverged run is not below
    ([0.02] * 4, [0.045], "undecided"),  # fewer fresh seeds than the rule needs
    ([0.02] * 5, [0.045, 0.04], "undecided"),  # a lowrank run below the fit: not the minimum
])
def test_rule_verdicts(mos, low, want):
  assert stats.decide(FreshRule(), mos, FLOOR_GAP, low)["verdict"] == want
