"""The experiment runner: trained and measured once, budget stops resumed, other configs refused."""

import dataclasses

import numpy as np
import pytest

from sbjax.experiment import Experiment, Group, Preset
from sbjax.experiment.runner import run
from sbjax.analysis.table import read_csv
from sbjax.train import preempt, train_once
from tests._tiny import tiny_run_config

CALLS = []


def _plan(ctx):
  cfg = tiny_run_config(steps=8, eval_every=8, ckpt_every=4, log_every=4, ckpt_log_spaced=False)
  with_seed = lambda s: cfg.replace(train=dataclasses.replace(cfg.train, seed=s))  # noqa: E731
  yield Group("one", [cfg], labels=[{"arm": "one"}])
  first = ctx.results["one"][0]["eval_loss"]  # a later group may read an earlier one
  yield Group("pop", [with_seed(1), with_seed(2)], labels=[{"arm": "pop", "after": first}] * 2)


def _measure(ctx, group, j, steps, params):
  CALLS.append((group.name, j, tuple(steps)))
  return [{"norm": float(sum(np.square(np.asarray(x)).sum() for x in
                             __import__("jax").tree.leaves(p)))} for p in params]


EXP = Experiment("toy", {"test": Preset("tiny", {}, None)}, _plan, measure=_measure,
                 measure_steps="all")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  """A finished run of EXP (copy it before changing it)."""
  out = tmp_path_factory.mktemp("runner") / "out"
  run(EXP, out, "test", verbose=False)
  return out


def test_trains_and_measures_once(done):
  out = done
  runs, points = read_csv(out / "runs.csv"), read_csv(out / "checkpoints.csv")
  assert [(r["group"], r["member"]) for r in runs] == [("one", 0), ("pop", 0), ("pop", 1)]
  assert runs[1]["after"] == runs[0]["eval_loss"]
  assert [p["step"] for p in points] == [0, 4, 8] * 3
  assert (out / "runs" / "pop" / "member_1" / "DONE").exists()
  n = len(CALLS)
  run(EXP, out, "test", verbose=False)  # nothing trained or measured again
  assert len(CALLS) == n
  assert read_csv(out / "checkpoints.csv") == points


def test_budget_stop_resumes_to_the_same_numbers(done, tmp_path):
  full, cut = done, tmp_path / "cut"
  preempt.set_deadline(0.0)  # already past: stop at the first step boundary
  try:
    with pytest.raises(preempt.Preempted) as stop:
      run(EXP, cut, "test", verbose=False)
  finally:
    preempt.set_deadline(None)
  assert stop.value.code == 75 and "time budget" in str(stop.value)
  run(EXP, cut, "test", verbose=False)
  assert read_csv(cut / "runs.csv") == read_csv(full / "runs.csv")
  kept = read_csv(full / "checkpoints.csv")  # the stop saved step 1 besides the schedule's
  assert [p for p in read_csv(cut / "checkpoints.csv") if p["step"] != 1] == kept


def test_a_finished_run_of_another_config_is_refused(tmp_path):
  cfg = tiny_run_config(steps=2, eval_every=2, ckpt_every=2, log_every=1, ckpt_log_spaced=False)
  train_once(cfg, tmp_path / "run")
  renamed = cfg.replace(name="other")  # a setting that changes no number: read back
  assert train_once(renamed, tmp_path / "run")["step"] == 2
  with pytest.raises(ValueError, match=r"another configuration \(train.lr: 0.003 -> 0.5\)"):
    train_once(cfg.replace(train=dataclasses.replace(cfg.train, lr=0.5)), tmp_path / "run")
