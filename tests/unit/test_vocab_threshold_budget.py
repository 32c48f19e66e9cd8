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
