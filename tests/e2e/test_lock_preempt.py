"""Nothing lost (issue 34): the workdir lock and the SIGTERM save, on real trainer processes.

One module fixture drives four `python -m experiments.train --config=tiny` processes (the
soak test's command, benchmarks/soak.py `train_cmd`, so the compiled step is shared through
the persistent compilation cache):

- A trains into W. Once A has saved step 0 (it is in its loop, holding W's lock) it is
  paused with SIGSTOP, so the interleaving is fixed;
- B, the same command on W, starts and must stop with one `error:` line naming A (host, pid),
  writing nothing;
- A gets SIGTERM and SIGCONT: it must save the step in flight (off the checkpoint schedule:
  steps 0 and 24 only) and exit with status 75, saying which step it saved;
- R, the uninterrupted reference, runs in a workdir holding a stale LOCK (a dead pid of this
  host), which it must take over, saying so;
- A' reruns A's command: it resumes from the saved step, and its final parameters, optimizer
  state, losses and eval losses must equal R's bit for bit; metrics.jsonl has no duplicate
  line.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.soak import ROOT, soak_env, train_cmd

STEPS = 24  # the soak test's tiny run: its compiled step is in the shared cache
TIMEOUT = 300


def _cmd(wd: Path, tfds: Path) -> list[str]:
  # checkpoints at 0 and STEPS only: the SIGTERM save is off the schedule
  return train_cmd(wd, STEPS, tfds, ckpt_every=STEPS) + ["--config.train.ckpt_log_spaced=false"]


def _files(root: Path) -> dict:
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _dead_pid() -> int:
  p = subprocess.Popen([sys.executable, "-c", "pass"])
  p.wait()
  return p.pid


def _wait_for(path: Path, proc: subprocess.Popen, what: str) -> None:
  t0 = time.monotonic()
  while not path.exists():
    if proc.poll() is not None or time.monotonic() - t0 > TIMEOUT:
      raise AssertionError(f"{what}: the trainer exited ({proc.returncode}) or timed out first")
    time.sleep(0.002)


def _first_run_and_second_trainer(wd: Path, tfds: Path, env: dict, logs: Path) -> dict:
  """A (SIGSTOPped in its loop), B refused, then A's SIGTERM save (module doc)."""
  with open(logs / "a.txt", "w") as log_a:
    a = subprocess.Popen(_cmd(wd, tfds), cwd=ROOT, env=env, stdout=log_a, stderr=log_a)
    try:
      _wait_for(wd / "checkpoints" / "0", a, "step 0")
      os.kill(a.pid, signal.SIGSTOP)
      holder = json.loads((wd / "LOCK").read_text())
      before = _files(wd)
      b = subprocess.run(_cmd(wd, tfds), cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT)
      after_b = _files(wd)
      os.kill(a.pid, signal.SIGTERM)
    finally:
      os.kill(a.pid, signal.SIGCONT)
      rc_a = a.wait(timeout=TIMEOUT)
  return {"a_rc": rc_a, "a_log": (logs / "a.txt").read_text(), "a_pid": a.pid, "holder": holder,
          "b": b, "b_changed": before != after_b, "steps_after_a": _steps(wd),
          "metrics_after_a": (wd / "metrics.jsonl").read_text()}


def _steps(wd: Path) -> list[int]:
  return sorted(int(p.name) for p in (wd / "checkpoints").iterdir() if p.name.isdigit())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  out = tmp_path_factory.mktemp("lock_preempt")
  env, tfds, logs = soak_env(), out / "tfds", out / "logs"
  env.pop("SBJAX_DEBUG", None)
  logs.mkdir()
  wd, ref = out / "run", out / "ref"
  res = _first_run_and_second_trainer(wd, tfds, env, logs)
  ref.mkdir()
  dead = _dead_pid()
  (ref / "LOCK").write_text(json.dumps({"host": socket.gethostname(), "pid": dead,
                                        "started": "2026-01-01T00:00:00Z", "heartbeat": 0}))
  res["dead_pid"] = dead
  res["ref"] = subprocess.run(_cmd(ref, tfds), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
  res["rerun"] = subprocess.run(_cmd(wd, tfds), cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=TIMEOUT)
  res.update(wd=wd, ref_wd=ref)
  return res


def test_second_trainer_stops_with_one_line_naming_the_holder(runs):
  b, holder = runs["b"], runs["holder"]
  assert holder["pid"] == runs["a_pid"] and holder["host"] == socket.gethostname(), holder
  assert b.returncode == 2, (b.returncode, b.stderr[-2000:])
  errors = [line for line in b.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1, b.stderr[-2000:]
  assert f"host {socket.gethostname()}, pid {runs['a_pid']}" in errors[0], errors
  assert "is in use by another run" in errors[0] and "--workdir" in errors[0], errors
  assert "Traceback" not in b.stderr, b.stderr[-2000:]
  assert not runs["b_changed"], "the refused trainer changed the first run's workdir"


def test_sigterm_saves_the_step_in_flight_and_exits_75(runs):
  assert runs["a_rc"] == 75, runs["a_log"][-3000:]
  steps = runs["steps_after_a"]
  s = steps[-1]
  assert steps == [0, s] and 0 < s < STEPS, steps  # saved off the schedule (0, 24)
  assert f"preempted (SIGTERM): saved step {s} in {runs['wd']}" in runs["a_log"], runs["a_log"]
  train = [json.loads(x)["step"] for x in runs["metrics_after_a"].splitlines()
           if "loss" in json.loads(x)]
  assert train == list(range(s)), train  # every step logged once, none beyond the save


def test_rerun_after_sigterm_equals_uninterrupted_run_bitwise(runs):
  import jax

  from sbjax import checkpoint as ckpt
  from sbjax.model import Model
  from sbjax.optim import make_optimizer

  r, ref = runs["rerun"], runs["ref"]
  assert ref.returncode == 0 and r.returncode == 0, (ref.stderr[-2000:], r.stderr[-2000:])
  s = runs["steps_after_a"][-1]
  assert f"from step {s}" in r.stderr, r.stderr[-2000:]
  wd, ref_wd = runs["wd"], runs["ref_wd"]
  assert json.loads(r.stdout)["step"] == json.loads(ref.stdout)["step"] == STEPS
  cfg = ckpt.load_config(wd)
  ap = Model(cfg.model).abstract_params(cfg.train.seq_len)
  ao = jax.eval_shape(make_optimizer(cfg.train, cfg.model, ap).init, ap)
  ap, ao = ckpt.abstract_with_shardings(ap), ckpt.abstract_with_shardings(ao)
  got, want = ckpt.restore(wd, STEPS, ap, ao), ckpt.restore(ref_wd, STEPS, ap, ao)
  for x, y in zip(jax.tree.leaves(got[:2]), jax.tree.leaves(want[:2]), strict=True):
    assert np.array_equal(np.asarray(x), np.asarray(y))
  lines = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  ref_lines = [json.loads(x) for x in (ref_wd / "metrics.jsonl").read_text().splitlines()]
  keys = [(rec["step"], "loss" in rec) for rec in lines]
  assert len(keys) == len(set(keys)), "metrics.jsonl holds a duplicate line"
  for k in ("loss", "eval_loss"):
    assert ([(x["step"], x[k]) for x in lines if k in x]
            == [(x["step"], x[k]) for x in ref_lines if k in x]), k


def test_stale_lock_of_a_dead_pid_is_taken_over(runs):
  ref = runs["ref"]
  assert ref.returncode == 0, ref.stderr[-2000:]
  assert "took over the stale lock" in ref.stderr, ref.stderr[-2000:]
  assert f"pid {runs['dead_pid']}" in ref.stderr, ref.stderr[-2000:]
  assert not (runs["ref_wd"] / "LOCK").exists() and not (runs["wd"] / "LOCK").exists()
