"""Kill-and-resume soak (CI size): `python -m experiments.train --config=tiny` is SIGKILLed
at random times (a checkpoint after every step, so most kills land mid-save), rerun until it
finishes, and compared with an uninterrupted run of the same command: final parameters,
every checkpoint (restored with orbax), the metrics.jsonl loss sequence, all bitwise equal.
The long version is `benchmarks/soak.py` (BUILD_NOTES.md has its counts)."""

import json

from benchmarks.soak import run_soak, soak_env

# Two kills, three starts: one aimed at a save (the mid-save case below) and one at a random
# moment after training made progress; the second start resumes a killed run and is killed
# itself, so a resume of a resume is covered. (A third kill repeated the "save" mode for one
# more fresh process: 2.5 s of CPU, measured, for a case already checked.)
KILLS = 2
PLAN = ["save", "random"]
# 24 steps: the schedule of the session's tiny run (tests/_tiny.py), so the train step it
# compiled in-process is already in the shared compilation cache
STEPS = 24


def test_killed_runs_equal_the_uninterrupted_run_bitwise(tmp_path):
  # soak_env keeps the persistent compilation cache tests/conftest.py set up, so each
  # restart loads the compiled step instead of compiling it again.
  soak = run_soak(tmp_path, kills=KILLS, steps=STEPS, seed=1, plan=PLAN, env=soak_env())
  print(json.dumps(soak))
  assert soak["bitwise_equal"]  # run_soak raises, naming the difference, otherwise
  assert soak["kills"] == KILLS and soak["starts"] == KILLS + 1
  assert soak["resumes"] >= 1  # later attempts restored a checkpoint (logged "resuming")
  assert soak["checkpoints_restored"] == STEPS + 1 and soak["losses_compared"] == STEPS
  assert soak["kills_mid_save"] >= 1, soak
  # each unfinished save was moved aside (never deleted); no finished step was lost
  assert soak["moved_aside_tmp"] == soak["kills_mid_save"] and soak["moved_aside_steps"] == 0
