"""The SIGTERM save, on real trainer processes (the soak test's command, benchmarks/soak.py
``train_cmd``: its compiled step is in the shared compilation cache). A trains into W; once
it has saved step 0 it is paused (SIGSTOP: the interleaving is fixed), given SIGTERM and
resumed: it saves the step in flight (off the schedule: checkpoints at 0 and 24 only) and
exits 75 naming it. Its rerun resumes from that step and equals an uninterrupted run R bit
for bit (parameters, optimizer state, losses, eval losses), with no duplicate metrics line."""

import json
import os
import signal
import subprocess
import time

import jax
import numpy as np

from benchmarks.soak import ROOT, soak_env, train_cmd
from sbjax import checkpoint as ckpt
from sbjax.model import Model
from sbjax.optim import make_optimizer

STEPS, TIMEOUT = 24, 300


def _cmd(wd, tfds):
  return train_cmd(wd, STEPS, tfds, ckpt_every=STEPS) + ["--config.train.ckpt_log_spaced=false"]


def _run(cmd, env):
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def test_sigterm_saves_the_step_in_flight_and_the_rerun_equals_an_uninterrupted_run(tmp_path):
  env, tfds, wd, ref = soak_env(), tmp_path / "tfds", tmp_path / "run", tmp_path / "ref"
  env.pop("SBJAX_DEBUG", None)
  with open(tmp_path / "a.txt", "w") as log:
    a = subprocess.Popen(_cmd(wd, tfds), cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
      t0 = time.monotonic()
      while not (wd / "checkpoints" / "0").exists():
        assert a.poll() is None and time.monotonic() - t0 < TIMEOUT, "exited or timed out first"
        time.sleep(0.002)
      os.kill(a.pid, signal.SIGSTOP)
      os.kill(a.pid, signal.SIGTERM)
    finally:
      os.kill(a.pid, signal.SIGCONT)
    rc = a.wait(timeout=TIMEOUT)
  a_log = (tmp_path / "a.txt").read_text()
  steps = ckpt.list_steps(wd)
  s = steps[-1]
  assert rc == 75 and steps == [0, s] and 0 < s < STEPS, (steps, a_log[-3000:])
  assert f"preempted (SIGTERM): saved step {s} in {wd}" in a_log, a_log[-3000:]
  logged = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  assert [x["step"] for x in logged if "loss" in x] == list(range(s))  # none beyond the save
  r, rerun = _run(_cmd(ref, tfds), env), _run(_cmd(wd, tfds), env)
  assert r.returncode == 0 and rerun.returncode == 0, (r.stderr[-2000:], rerun.stderr[-2000:])
  assert f"from step {s}" in rerun.stderr, rerun.stderr[-2000:]
  assert json.loads(rerun.stdout)["step"] == json.loads(r.stdout)["step"] == STEPS
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
