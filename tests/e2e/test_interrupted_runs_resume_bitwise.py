"""Interrupted trainer processes (``python -m experiments.train --config=tiny``, the command of
benchmarks/soak.py) resume to the uninterrupted run of the same command, bit for bit: the
kill -9 soak (a checkpoint after every step, so that a kill lands mid-save; the long version is
benchmarks/soak.py), and the SIGTERM save (paused once step 0 is saved, so the interleaving is
fixed: it saves the step in flight and exits 75; the rerun's output is the command line's)."""

import json
import os
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

from benchmarks.soak import ROOT, run_soak, soak_env, train_cmd
from sbjax import checkpoint as ckpt
from sbjax.model import Model
from sbjax.optim import make_optimizer

STEPS, TIMEOUT = 24, 300  # the schedule of tests/_tiny.py: its compiled step is in the cache


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
  out = tmp_path_factory.mktemp("soak")
  return out, run_soak(out, kills=2, steps=STEPS, seed=1, plan=["save", "random"],
                       env=soak_env())


def test_killed_runs_equal_the_uninterrupted_run_bitwise(soak):
  _, s = soak
  assert s["bitwise_equal"]  # run_soak raises, naming the difference, otherwise
  assert s["kills"] == 2 and s["starts"] == 3 and s["resumes"] >= 1 and s["kills_mid_save"] >= 1
  assert s["checkpoints_restored"] == STEPS + 1 and s["losses_compared"] == STEPS
  # each unfinished save was moved aside (never deleted); no finished step was lost
  assert s["moved_aside_tmp"] == s["kills_mid_save"] and s["moved_aside_steps"] == 0


def _sigterm_after_step_0(cmd, env, wd, log_path) -> int:
  with open(log_path, "w") as log:
    a = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
      t0 = time.monotonic()
      while not (wd / "checkpoints" / "0").exists():
        assert a.poll() is None and time.monotonic() - t0 < TIMEOUT, "exited or timed out first"
        time.sleep(0.002)
      os.kill(a.pid, signal.SIGSTOP)
      os.kill(a.pid, signal.SIGTERM)
    finally:
      os.kill(a.pid, signal.SIGCONT)
    return a.wait(timeout=TIMEOUT)


def test_sigterm_saves_the_step_in_flight_and_the_rerun_equals_the_uninterrupted_run(
    soak, tmp_path):
  ref, tfds = soak[0] / "ref", soak[0] / "tfds"
  env, wd = soak_env(), tmp_path / "run"
  cmd = train_cmd(wd, STEPS, tfds, ckpt_every=STEPS) + ["--config.train.ckpt_log_spaced=false"]
  rc = _sigterm_after_step_0(cmd, env, wd, tmp_path / "a.txt")
  a_log, steps = (tmp_path / "a.txt").read_text(), ckpt.list_steps(wd)
  s = steps[-1]
  assert rc == 75 and steps == [0, s] and 0 < s < STEPS, (steps, a_log[-3000:])
  assert f"preempted (SIGTERM): saved step {s} in {wd}" in a_log, a_log[-3000:]
  logged = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  assert [x["step"] for x in logged if "loss" in x] == list(range(s))  # none beyond the save
  rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  err = rerun.stderr
  assert rerun.returncode == 0 and f"from step {s}" in err, err[-2000:]
  assert json.loads(rerun.stdout)["step"] == STEPS  # stdout is the JSON result alone
  assert "\r" not in err and "Using custom data configuration" not in err
  progress = [ln for ln in err.splitlines() if ln.startswith("[run] step ")]
  assert progress[0].startswith(f"[run] step {s + 1}/{STEPS} loss ") and "(compiled)" in progress[0]
  assert progress[-1].startswith(f"[run] step {STEPS}/{STEPS} loss ") and \
      " tok/s ETA 0m00s" in progress[-1], progress
  cfg = ckpt.load_config(wd)
  ap = Model(cfg.model).abstract_params(cfg.train.seq_len)
  ao = jax.eval_shape(make_optimizer(cfg.train, cfg.model, ap).init, ap)
  ap, ao = ckpt.abstract_with_shardings(ap), ckpt.abstract_with_shardings(ao)
  got, want = ckpt.restore(wd, STEPS, ap, ao), ckpt.restore(ref, STEPS, ap, ao)
  for x, y in zip(jax.tree.leaves(got[:2]), jax.tree.leaves(want[:2]), strict=True):
    assert np.array_equal(np.asarray(x), np.asarray(y))
  lines = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  ref_lines = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
  keys = [(x["step"], "loss" in x) for x in lines]
  assert len(keys) == len(set(keys)), "metrics.jsonl holds a duplicate line"
  for k in ("loss", "eval_loss"):
    assert [(x["step"], x[k]) for x in lines if k in x] == [
        (x["step"], x[k]) for x in ref_lines if k in x], k
