"""experiments/collapse/budget.py: the time estimate after the timed steps and the clean stop
before a group overruns Knobs.budget_s, on a real Dataset (no training: the loop's batch
requests are made here, with a known pause per step)."""

import time

import numpy as np
import pytest

from experiments.collapse import budget
from experiments.collapse.presets import get_preset
from sbjax.data.dataset import Dataset


def _dataset():
  toks = np.arange(2000) % 64
  return Dataset(toks[:1600], toks[1600:], seq_len=16, global_batch_size=4, seed=0,
                 vocab_size=64, process_index=0, process_count=1)


def _steps(ds, n, pause):
  for i in range(n):
    ds.train_batch(i)
    time.sleep(pause)


def test_the_estimate_is_printed_and_the_batches_pass_through(capsys):
  raw = _dataset()
  clock = budget.Clock(budget_s=0, estimate_at=5)  # no budget: estimate only
  other = _dataset()
  ds = budget.watch([raw, other], clock, "g", steps=40, member_tokens=128)
  assert isinstance(ds[0], budget.Watched) and ds[1] is other  # member 0 alone is timed
  assert ds[0].vocab_size == 64 and ds[0].n_train_windows == raw.n_train_windows
  _steps(ds[0], 20, 0.01)
  np.testing.assert_array_equal(ds[0].train_batch(3), raw.train_batch(3))
  err = capsys.readouterr().err
  assert "estimate: group g: 40 steps," in err
  per_step = float(err.split("steps, ")[1].split(" s/step")[0])
  assert 0.01 <= per_step < 1.0  # at least the pause of each step
  assert clock.s_per_token == pytest.approx(per_step / 128, rel=1e-3)
  # a run too short to time is left alone
  assert budget.watch([raw], clock, "g", steps=15, member_tokens=128)[0] is raw
  assert budget.watch([raw], None, "g", steps=400, member_tokens=128)[0] is raw


def test_a_group_that_would_overrun_stops_cleanly():
  clock = budget.Clock(budget_s=0.5, estimate_at=5)
  [ds] = budget.watch([_dataset()], clock, "big", steps=10_000, member_tokens=128)
  with pytest.raises(budget.OverBudget, match=r"group big would end at ~\d+ s, past the 0.5 s "
                     r"budget: stopped after 15 steps .*rerun to resume"):
    _steps(ds, 16, 0.01)
  # the next group is refused before it starts when the slowest rate says it cannot fit
  with pytest.raises(budget.OverBudget, match="group next needs ~.* stopped before it"):
    clock.check_start("next", 10_000 * 128)
  clock.check_start("tiny", 0)  # nothing to do fits


def test_the_device_presets_have_a_budget_within_eight_minutes():
  for name in ("gpu", "gpu-grid"):
    k = get_preset(name).knobs
    assert 0 < k.budget_s <= 480 and k.estimate_at == 200
