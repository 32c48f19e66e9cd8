"""Nothing lost (issue 34), in process: bad values refused before anything is written, the
real step of a resumed run, the workdir lock's own rules, and exports / imports that never
overwrite a run. Every refusal is one line naming the problem and the fix, and leaves every
file as it was (``assert_nothing_lost`` of tests/integration/test_bad_inputs.py)."""

import dataclasses
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from sbjax import checkpoint as ckpt
from sbjax.cli import convert as convert_cli
from sbjax.config import Config, TrainConfig
from sbjax.train import train
from sbjax.train import lock as lock_lib
from tests.integration.test_bad_inputs import ROOT, assert_nothing_lost, snapshot, tiny_cfg

pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]


def _one_line(e, *needles) -> None:
  first = str(e.value).splitlines()[0]
  for n in needles:
    assert n in first, (n, first)
  assert len(str(e.value).splitlines()) == 1, str(e.value)


# ----------------------------------------------------------------------------- validation
BAD_TRAIN = [("lr", math.nan), ("lr", math.inf), ("lr", -1e-3), ("b1", 2.0), ("b1", -0.1),
             ("b2", 1.0), ("b2", math.nan), ("eps", 0.0), ("eps", math.nan),
             ("weight_decay", math.nan), ("clip", math.nan), ("clip", 0.0)]


@pytest.mark.parametrize("field,value", BAD_TRAIN, ids=[f"{f}={v}" for f, v in BAD_TRAIN])
def test_train_config_refuses(field, value):
  with pytest.raises(ValueError) as e:
    TrainConfig(**{field: value})
  _one_line(e, f"invalid config: train.{field}={value!r}", "allowed: ")


def test_a_nan_lr_in_a_config_file_is_refused():
  d = Config().to_dict()
  d["train"]["lr"] = math.nan
  with pytest.raises(ValueError, match="train.lr=nan"):
    Config.from_dict(json.loads(json.dumps(d)))  # Python's json reads a bare NaN


def test_negative_stop_after_is_refused_before_anything_is_written(tmp_path, ds):
  with pytest.raises(ValueError) as e:
    train(tiny_cfg(), tmp_path / "w", dataset=ds, quiet=True, stop_after=-5)
  _one_line(e, "--stop_after=-5", "a step >= 0")
  assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e  # starts a CLI process
def test_cli_nan_lr_writes_nothing(tmp_path):
  (tmp_path / "keep.txt").write_text("keep me\n")
  before = snapshot(tmp_path)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("SBJAX_DEBUG", None)
  r = subprocess.run([sys.executable, "-m", "experiments.train", "--config=tiny",
                      f"--workdir={tmp_path}/w", "--config.train.lr=nan",
                      f"--config.data.options.data_dir={tmp_path}/tfds"], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 2, r.stderr[-2000:]
  errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "train.lr=nan" in errors[0], r.stderr[-2000:]
  assert snapshot(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["keep.txt"]


# ----------------------------------------------------------------------------- the real step
def test_workdir_past_train_steps_is_refused(tmp_path, run_dir, ds):
  wd = tmp_path / "run"
  shutil.copytree(run_dir, wd)
  before = snapshot(tmp_path)
  cfg = tiny_cfg()
  cfg = cfg.replace(train=dataclasses.replace(cfg.train, steps=1))
  with pytest.raises(ValueError) as e:
    train(cfg, wd, dataset=ds, quiet=True)
  _one_line(e, "is already at step 2, past train.steps=1", "pass train.steps >= 2",
            "new --workdir")
  assert snapshot(tmp_path) == before  # nothing written, not even a lock


def test_resumed_summary_gives_the_step_of_its_parameters(tmp_path, run_dir, ds):
  wd = tmp_path / "run"
  shutil.copytree(run_dir, wd)
  s = train(tiny_cfg(), wd, dataset=ds, quiet=True, stop_after=1)  # the workdir is at step 2
  assert s["start_step"] == 2 and s["step"] == 2, s
  assert ckpt.list_steps(wd) == [0, 1, 2] and not (wd / lock_lib.LOCK).exists()


# ----------------------------------------------------------------------------- the lock
def _dead_pid() -> int:
  p = subprocess.Popen([sys.executable, "-c", "pass"])
  p.wait()
  return p.pid


def test_lock_is_exclusive_and_names_its_holder(tmp_path):
  first = lock_lib.LocalLock(tmp_path)
  first.acquire()
  try:
    holder = json.loads((tmp_path / "LOCK").read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(lock_lib.WorkdirLockedError) as e:  # another open file: flock refuses
      lock_lib.LocalLock(tmp_path).acquire()
    _one_line(e, f"is in use by another run (host {socket.gethostname()}, pid {os.getpid()}",
              f"kill {os.getpid()}", "another --workdir")
  finally:
    first.release()
  assert not (tmp_path / "LOCK").exists()


def test_stale_local_lock_is_taken_over(tmp_path, caplog):
  dead = _dead_pid()
  (tmp_path / "LOCK").write_text(json.dumps({"host": socket.gethostname(), "pid": dead,
                                             "started": "2026-01-01T00:00:00Z"}))
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    with lock_lib.workdir_lock(tmp_path):
      with lock_lib.workdir_lock(tmp_path):  # re-entrant within a process
        assert json.loads((tmp_path / "LOCK").read_text())["pid"] == os.getpid()
  msgs = [r.getMessage() for r in caplog.records if r.name == "sbjax"]
  assert len(msgs) == 1 and "took over the stale lock" in msgs[0] and f"pid {dead}" in msgs[0]
  assert not (tmp_path / "LOCK").exists()


def test_heartbeat_lock_refuses_a_live_holder_and_takes_over_a_silent_one(tmp_path, caplog):
  """The remote-storage lock object, on a local path: its rules do not depend on the store."""
  other = {"host": "another-host", "pid": 1, "started": "2026-01-01T00:00:00Z",
           "heartbeat": time.time(), "token": "x"}
  (tmp_path / "LOCK").write_text(json.dumps(other))
  lk = lock_lib.HeartbeatLock(tmp_path, interval_s=0.05, missed=4)
  with pytest.raises(lock_lib.WorkdirLockedError) as e:
    lk.acquire()
  _one_line(e, "host another-host, pid 1")
  other["heartbeat"] = time.time() - 0.05 * 4 - 1  # four heartbeats missed: stale
  (tmp_path / "LOCK").write_text(json.dumps(other))
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    lk.acquire()
  try:
    beat0 = json.loads((tmp_path / "LOCK").read_text())["heartbeat"]
    time.sleep(0.3)
    assert json.loads((tmp_path / "LOCK").read_text())["heartbeat"] > beat0  # it beats
  finally:
    lk.release()
  assert any("took over the stale lock" in r.getMessage() for r in caplog.records)
  assert not (tmp_path / "LOCK").exists()


def test_a_file_system_without_flock_gets_the_heartbeat_lock(tmp_path, monkeypatch, caplog):
  def no_flock(fd, op):
    raise OSError(37, "No locks available")

  monkeypatch.setattr(lock_lib.fcntl, "flock", no_flock)
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    with lock_lib.workdir_lock(tmp_path):
      held = lock_lib._HELD[os.path.realpath(tmp_path)][0]
      assert isinstance(held, lock_lib.HeartbeatLock)
      assert json.loads((tmp_path / "LOCK").read_text())["pid"] == os.getpid()
  assert any("no flock on this file system" in r.getMessage() for r in caplog.records)
  assert not (tmp_path / "LOCK").exists()


# ----------------------------------------------------------------------------- convert
def test_export_never_writes_into_a_workdir(tmp_path, run_dir):
  wd = tmp_path / "run"
  shutil.copytree(run_dir, wd)
  before = snapshot(tmp_path)
  for overwrite in (False, True):
    with pytest.raises(ValueError) as e:
      convert_cli.export_from_workdir(str(wd), str(wd), overwrite=overwrite)
    _one_line(e, f"--to_hf={wd} is an sbjax workdir", "give a new directory")
  assert snapshot(tmp_path) == before


def test_export_refuses_a_non_empty_directory_unless_overwrite(tmp_path, run_dir):
  out = tmp_path / "hf"
  out.mkdir()
  (out / "notes.txt").write_text("mine\n")
  before = snapshot(tmp_path)
  with pytest.raises(ValueError) as e:
    convert_cli.export_from_workdir(str(run_dir), str(out))
  _one_line(e, f"--to_hf={out} is not empty (1 entries: notes.txt)", "--overwrite")
  assert snapshot(tmp_path) == before
  assert convert_cli.export_from_workdir(str(run_dir), str(out), overwrite=True) == 2
  assert (out / "model.safetensors").is_file() and (out / "notes.txt").read_text() == "mine\n"


def test_import_refuses_a_training_workdir(tmp_path, run_dir, hf_dir):
  wd = tmp_path / "run"
  shutil.copytree(run_dir, wd)
  (wd / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 4.0}) + "\n")
  before = snapshot(tmp_path)
  with pytest.raises(ValueError) as e:
    convert_cli.import_to_workdir(str(hf_dir), str(wd), step=3)
  _one_line(e, f"--to={wd} is a training workdir (it holds metrics.jsonl and training "
            "checkpoints with optimizer state (steps [0, 1, 2])", "new --to directory")
  assert_nothing_lost(tmp_path, before)
  assert snapshot(tmp_path) == before and ckpt.list_steps(wd) == [0, 1, 2]
