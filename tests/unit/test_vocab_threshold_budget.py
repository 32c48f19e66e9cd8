"""vocab_threshold's budget stop inside a run (experiments/vocab_threshold/budget.py): the
loop hook of a run times the estimate_at steps after its warm-up, prints the projected end
and, past the budget, stops with exit status 75 naming the run and how to resume; within the
budget it only prints. (The stop before a run and the resume: the twin end to end,
tests/e2e/test_vocab_threshold_gpu.py.)"""

import re
import time

import pytest

from experiments.vocab_threshold.budget import Clock, OverBudget
from tests._tiny import tiny_run_config


def _drive(clock, cfg, wd):
  """The hook of a run of ``cfg`` in the (new) workdir ``wd``, stepped by hand (~10 ms a
  step)."""
  (w,) = clock.hooks("V96/")("full", [cfg], [wd])
  w.begin(None, 0, cfg.train.steps)
  for i in range(cfg.train.steps):
    time.sleep(0.01)
    w.on_step(i, {})


def test_stop_inside_a_run_past_the_budget(capsys, tmp_path):
  """400 steps of >= 10 ms end past 0.5 s; the start check (nothing measured yet) passes."""
  cfg = tiny_run_config(steps=400)
  clock = Clock(budget_s=0.5, estimate_at=2, warmup=1)
  with pytest.raises(OverBudget) as e:
    _drive(clock, cfg, tmp_path / "w")
  assert e.value.code == 75
  assert re.match(r"run V96/full would end at ~\d+ s, past the 0.5 s budget: stopped after "
                  r"4 steps \(its checkpoints so far are kept\); rerun the same command to "
                  "resume", str(e.value))
  assert re.search(r"estimate: run V96/full: 400 steps, [\d.e-]+ s/step",
                   capsys.readouterr().err)
  assert clock.estimates["V96/full"]["steps"] == 400


def test_within_the_budget_it_only_prints(capsys, tmp_path):
  cfg = tiny_run_config(steps=6)
  clock = Clock(budget_s=3600, estimate_at=2, warmup=1)
  _drive(clock, cfg, tmp_path / "w")
  assert "estimate: run V96/full: 6 steps" in capsys.readouterr().err
  assert clock.s_per_token > 0  # the next run's start check uses the slowest rate


def test_report_of_a_stop_after_two_of_three_v(tmp_path):
  """A stop after V = 256 and 512 of (256, 512, 1024) (the tables and meta as run.py writes
  them at the stop): the section names the stop and the V not run, and its fit is over the two
  finished V only, marked partial: beta = the slope of log r* on log V by numpy, and no
  verdict on a constant threshold. (The same on the twin's real output, one V finished:
  tests/e2e/test_vocab_threshold_gpu.py.)"""
  import json

  import numpy as np

  from experiments.shared import write_rows
  from experiments.vocab_threshold import report

  rows = [{"V": v, "d_model": 64, "full_loss": 3.0, "reference": "a-r=d",
           "chars_per_token": 3.0, "tol_token": 0.015, "r_star": r, "censored": 0,
           "loss_at_r_star": 3.01, "r_werror06": w, "ranks": "8 16 32 48 64"}
          for v, r, w in ((256, 16, 20), (512, 32, 24))]
  write_rows(tmp_path / report.TABLE_CSV, rows)
  (tmp_path / report.META).write_text(json.dumps({
      "vocabs": [256, 512, 1024], "budget_s": 450.0, "not_run": [1024],
      "stopped": "run V1024/full-dense-lr0.001 would end at ~610 s, past the 450 s budget"}))
  fit = report.read_fit(tmp_path, report.read_rows(tmp_path / report.TABLE_CSV))
  assert fit["partial"] and fit["r_star"]["n"] == 2
  assert fit["r_star"]["beta"] == pytest.approx(np.polyfit(np.log([256, 512]),
                                                           np.log([16, 32]), 1)[0])
  md = report.report_section(tmp_path, ".")
  assert ("**The run stopped at its time budget (450 s)**: run V1024/full-dense-lr0.001 would "
          "end at ~610 s, past the 450 s budget. V finished: 256, 512; not run: 1024.") in md
  assert "Partial fit, over the V that finished only (2 of them): sbjax here: r* ∝ V^beta " \
         "with beta = 1.000" in md
  assert "not tested on a partial run" in md and "is rejected" not in md
  assert "not rejected" not in md and "| 1024 |" not in md
  # once the rest has run (no V missing, fit.json written) the section is the full one
  (tmp_path / report.META).write_text(json.dumps({"vocabs": [256, 512], "not_run": [],
                                                  "stopped": None}))
  (tmp_path / report.FIT).write_text(json.dumps(report.table_fit(rows)))
  full = report.report_section(tmp_path, ".")
  assert "stopped" not in full and "Partial" not in full and "is not rejected" in full
