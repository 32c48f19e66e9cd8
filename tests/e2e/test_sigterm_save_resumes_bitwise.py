"""The SIGTERM save, on real trainer processes: a run given SIGTERM saves the step in flight
and exits 75, and its rerun equals an uninterrupted run bit for bit.

`python -m experiments.train --config=tiny` (the soak test's command, benchmarks/soak.py
`train_cmd`, so the compiled step is shared through the persistent compilation cache):

- A trains into W; once it has saved step 0 it is paused with SIGSTOP (the interleaving is
  fixed), given SIGTERM and resumed: it must save the step in flight (off the checkpoint
  schedule: steps 0 and 24 only) and exit with status 75, saying which step it saved;
- R, the uninterrupted reference, runs in another workdir;
- A' reruns A's command: it resumes from the saved step, and its final parameters, optimizer
  state, losses and eval losses equal R's bit for bit; metrics.jsonl has no duplicate line.
"""

import json
import os
import signal
import subprocess
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


def _steps(wd: Path) -> list[int]:
  return sorted(int(p.name) for p in (wd / "checkpoints").iterdir() if p.name.isdigit())


def _preempted_run(wd: Path, tfds: Path, env: dict, log: Path) -> int:
  """A: SIGTERM once step 0 is saved (module doc); returns its exit status."""
  with open(log, "w") as out:
    a = subprocess.Popen(_cmd(wd, tfds), cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
      t0 = time.monotonic()
      while not (wd / "checkpoints" / "0").exists():
        if a.poll() is not None or time.monotonic() - t0 > TIMEOUT:
          raise AssertionError(f"the trainer exited ({a.returncode}) or timed out first")
        time.sleep(0.002)
      os.kill(a.pid, signal.SIGSTOP)
      os.kill(a.pid, signal.SIGTERM)
    finally:
      os.kill(a.pid, signal.SIGCONT)
    return a.wait(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  out = tmp_path_factory.mktemp("preempt")
  env, tfds = soak_env(), out / "tfds"
  env.pop("SBJAX_DEBUG", None)
  wd, ref = out / "run", out / "ref"
  res = {"a_rc": _preempted_run(wd, tfds, env, out / "a.txt"), "wd": wd, "ref_wd": ref}
  res.update(a_log=(out / "a.txt").read_text(), steps_after_a=_steps(wd),
             metrics_after_a=(wd / "metrics.jsonl").read_text())
  for name, d in (("ref", ref), ("rerun", wd)):
    res[name] = subprocess.run(_cmd(d, tfds), cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=TIMEOUT)
  return res


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
