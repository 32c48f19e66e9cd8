"""Kill-and-resume soak (CI size): `python -m experiments.train --config=tiny` is SIGKILLed
at random times (a checkpoint after every step, so most kills land mid-save), rerun until it
finishes, and compared with an uninterrupted run of the same command: final parameters,
every checkpoint (restored with orbax), the metrics.jsonl loss sequence, all bitwise equal.
The long version is `benchmarks/soak.py` (BUILD_NOTES.md has its counts)."""

import json

import pytest

from benchmarks.soak import run_soak, soak_env

# Two kills, three starts: one aimed at a save (the mid-save case below) and one at a random
# moment after training made progress; the second start resumes a killed run and is killed
# itself, so a resume of a resume is covered. (A third kill repeated the "save" mode for one
# more fresh process: 2.5 s of CPU, measured, for a case already checked.)
KILLS = 2
PLAN = ["save", "random"]
# 24 steps: the schedule of tests/test_train.py's and test_checkpoint_corrupt.py's tiny runs, so
# the train step they compiled in-process is already in the shared compilation cache
STEPS = 24


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
  # soak_env keeps the persistent compilation cache tests/conftest.py set up, so each
  # restart loads the compiled step instead of compiling it again.
  out = tmp_path_factory.mktemp("soak")
  return run_soak(out, kills=KILLS, steps=STEPS, seed=1, plan=PLAN,
                  env=soak_env())


def test_killed_run_equals_uninterrupted_run_bitwise(soak):
  print(json.dumps(soak))
  assert soak["bitwise_equal"]  # run_soak raises, naming the difference, otherwise
  assert soak["kills"] == KILLS and soak["starts"] == KILLS + 1
  assert soak["resumes"] >= 1  # later attempts restored a checkpoint (logged "resuming")
  assert soak["checkpoints_restored"] == STEPS + 1 and soak["losses_compared"] == STEPS


def test_some_kills_landed_mid_save_and_were_cleaned_up(soak):
  assert soak["kills_mid_save"] >= 1, soak
  # each unfinished save was moved aside (never deleted); no finished step was lost
  assert soak["moved_aside_tmp"] == soak["kills_mid_save"], soak
  assert soak["moved_aside_steps"] == 0, soak
