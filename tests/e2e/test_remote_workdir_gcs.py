"""A ``gs://`` workdir end to end, offline, on a real GCS server (fake-gcs-server, see
tests/_gcs_emulator.py): a tiny run whose trainer is killed with SIGKILL after its first
checkpoints, the rerun that resumes it (taking over the dead holder's lock object) and
finishes it, and the analysis of the run; every file lands in the bucket, none in a local
``gs:`` folder. The command-line tools run as processes, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._gcs_emulator import gcs_emulator, objects

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN = "bkt/run"
STEPS, KILL_AT = 40, 10
# checkpoints at 0, 10, 20, 30 and 40 only (each an orbax save to the server and a step of the
# analysis): the kill comes after step 10's; the saves still ahead keep the trainer running
# while the test sees it and kills it.
TRAIN = [sys.executable, "-m", "sbjax.cli.train", "--config=tiny", f"--workdir=gs://{RUN}",
         f"--config.train.steps={STEPS}", "--config.train.eval_every=20",
         "--config.train.ckpt_log_spaced=false", f"--config.train.ckpt_every={KILL_AT}",
         "--config.data.options.train_tokens=0"]


def _sealed(step: int) -> bool:
  """Checkpoint ``step`` is final: its checksum manifest, written last, is in the bucket."""
  return f"{RUN}/checkpoints/{step}/checksums.json" in objects(RUN)


def _kill_after_checkpoint(proc, step: int) -> None:
  """SIGKILL the trainer once checkpoint ``step`` is final in the bucket."""
  while not _sealed(step):
    if proc.poll() is not None:
      raise AssertionError(f"the trainer ended before step {step}: {proc.stderr.read()[-2000:]}")
    time.sleep(0.05)  # a short poll: three saves (~3 s of CPU) remain after the kill step
  assert proc.poll() is None, "the run finished before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.wait()


@pytest.fixture(scope="module")
def gcs_run(tmp_path_factory):
  cwd = tmp_path_factory.mktemp("cwd")
  with gcs_emulator("bkt"):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.Popen(TRAIN, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    _kill_after_checkpoint(killed, KILL_AT)
    after_kill = objects(RUN)
    resumed = subprocess.run(TRAIN, cwd=cwd, env=env, capture_output=True, text=True)
    analyzed = subprocess.run([sys.executable, "-m", "sbjax.cli.analyze",
                               f"--workdir=gs://{RUN}"], cwd=cwd, env=env,
                              capture_output=True, text=True)
    yield {"cwd": cwd, "after_kill": after_kill, "resumed": resumed, "analyzed": analyzed,
           "objects": objects(RUN)}


def test_a_killed_run_resumes_and_finishes_in_the_bucket(gcs_run):
  names = gcs_run["after_kill"]
  assert f"{RUN}/LOCK" in names and f"{RUN}/config.json" in names
  assert f"{RUN}/checkpoints/{KILL_AT}/checksums.json" in names and f"{RUN}/DONE" not in names
  r = gcs_run["resumed"]
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout)
  assert out["step"] == STEPS and KILL_AT <= out["start_step"] < STEPS
  assert "took over the lock of gs://bkt/run: its holder is gone" in r.stderr
  names = gcs_run["objects"]
  for f in ("config.json", "metrics.jsonl", f"checkpoints/{STEPS}/checksums.json"):
    assert f"{RUN}/{f}" in names
  assert f"{RUN}/LOCK" not in names  # released at the end
  assert any(n.startswith(f"{RUN}/tb/events.out.tfevents.") for n in names)
  assert os.listdir(gcs_run["cwd"]) == []  # nothing in a local gs: folder


def test_the_analysis_reads_and_writes_the_bucket(gcs_run):
  a = gcs_run["analyzed"]
  assert a.returncode == 0, a.stderr[-3000:]
  out = json.loads(a.stdout)
  assert out["csv"] == f"gs://{RUN}/analysis/metrics.csv"
  assert out["steps"] == list(range(0, STEPS + 1, KILL_AT))  # every checkpoint analysed
  for f in ("metrics.csv", "metrics.json", "spectrum.npz", "fig_loss_anisotropy.png"):
    assert f"{RUN}/analysis/{f}" in gcs_run["objects"]
