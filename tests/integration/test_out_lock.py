"""One writer per experiment output folder (issue: the experiments' --out lock). A real second
process holds ``out_lock(OUT)`` (``sbjax.train.lock``; ``OUT/LOCK``) while this one calls
``python -m experiments.head_rank --out=OUT``: the call stops with one line naming the folder,
the holder and what to do, exit status 2, and leaves every file of OUT as it was. After the
holder is killed with SIGKILL the next caller takes the folder. The folder's own training
workdirs (``OUT/runs/<arm>``) take their own locks beside it, and ``experiments.reproduce``'s
runner locks OUT and each OUT/NAME."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sbjax.cli.reproduce import Suite
from sbjax.train import lock as lock_lib

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys\nfrom sbjax.train.lock import out_lock\nwith out_lock(sys.argv[1]):\n"
        "  print('held', flush=True)\n  sys.stdin.read()\n")  # until the test closes stdin


def tree(root: Path) -> dict:
  """Every path under ``root``: a file's sha256, a folder's "dir" (a new empty folder counts)."""
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


@pytest.fixture
def holder(tmp_path):
  """A second process holding ``out_lock(tmp_path / "out")`` until it is killed or its stdin
  closes; yields (the process, the folder)."""
  out = tmp_path / "out"
  p = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, text=True,
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    assert p.stdout.readline().strip() == "held"
    yield p, out
  finally:
    if p.poll() is None:
      p.kill()
    p.communicate()


def _busy_line(out, pid: int, flag: str = "--out") -> str:
  info = json.loads((Path(out) / "LOCK").read_text())
  assert info["pid"] == pid and info["host"] == socket.gethostname()
  return (f"the output folder {out} is in use by another run (host {info['host']}, pid {pid}, "
          f"started {info['started']}); wait for it to finish, stop it (kill {pid} on "
          f"{info['host']}), or use another {flag}")


def test_a_second_call_into_a_held_out_stops_before_writing(holder):
  p, out = holder
  (out / "head_rank.csv").write_text("rank,eval_loss\n4,2.5\n")  # the holder's results so far
  before = tree(out)
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-m", "experiments.head_rank", "--preset=test",
                      f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 2, r.stderr
  assert r.stdout == ""
  lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
  assert lines[-1] == "error: " + _busy_line(out, p.pid), r.stderr
  assert tree(out) == before  # the CSV and the holder's LOCK, byte for byte; nothing new


def test_after_the_holder_is_killed_the_next_caller_takes_the_folder(holder, caplog):
  p, out = holder
  (out / "kept.csv").write_text("a\n1\n")
  with pytest.raises(lock_lib.WorkdirLockedError) as e:
    with lock_lib.out_lock(out):
      pytest.fail("the lock of a live holder was taken")
  assert str(e.value) == _busy_line(out, p.pid)
  os.kill(p.pid, signal.SIGKILL)
  p.wait()
  assert (out / "LOCK").exists()  # no chance to delete it: the next caller finds it stale
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    with lock_lib.out_lock(out):
      assert json.loads((out / "LOCK").read_text())["pid"] == os.getpid()
  assert any(f"pid {p.pid}" in r.getMessage() and "took over the stale lock" in r.getMessage()
             for r in caplog.records)
  assert not (out / "LOCK").exists() and (out / "kept.csv").read_text() == "a\n1\n"


def test_the_out_lock_and_its_runs_workdir_locks_are_separate(tmp_path):
  """OUT/LOCK and OUT/runs/<arm>/LOCK: other files, other keys; a run that trains in OUT itself
  re-enters the out lock (one process)."""
  out, arm = tmp_path / "out", tmp_path / "out" / "runs" / "a"
  with lock_lib.out_lock(out):
    with lock_lib.workdir_lock(arm):
      assert json.loads((arm / "LOCK").read_text())["pid"] == os.getpid()
      assert len(lock_lib._HELD) == 2
    assert (out / "LOCK").exists() and not (arm / "LOCK").exists()
    with lock_lib.workdir_lock(out):  # re-entrant: the same lock, held once
      assert len(lock_lib._HELD) == 1
    assert (out / "LOCK").exists()
  assert not (out / "LOCK").exists()


EXP = '''
from pathlib import Path


def run(out, preset, *, data=None):
  (Path(out) / "result.csv").write_text("x\\n1\\n")


def report_section(out, rel):
  return "## " + rel
'''


def test_reproduce_locks_its_out_and_each_experiment_folder(tmp_path, monkeypatch):
  """A held OUT/NAME: that experiment is reported failed with the busy line, nothing written
  into its folder, the others run; a held OUT: the call stops before writing anything."""
  pkg = tmp_path / "mods"
  pkg.mkdir()
  (pkg / "l_exp_writes.py").write_text(textwrap.dedent(EXP))
  monkeypatch.syspath_prepend(str(pkg))
  suite = Suite({"a": "l_exp_writes", "b": "l_exp_writes"}, ("a",))
  out = tmp_path / "rep"
  p = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "b")], cwd=ROOT, text=True,
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    assert p.stdout.readline().strip() == "held"
    timings = suite.run_all(out, ["a", "b"], "test", verbose=False)
    assert timings["a"]["status"] == "ok" and (out / "a" / "result.csv").exists()
    assert timings["b"] == {**timings["b"], "status": "failed",
                            "error": "WorkdirLockedError: " + _busy_line(out / "b", p.pid)}
    assert sorted(x.name for x in (out / "b").iterdir()) == ["LOCK"]
    assert not (out / "LOCK").exists()  # released at the end of the call
  finally:
    p.communicate("")  # stdin closed: the holder releases and exits
  first = lock_lib.LocalLock(out)  # another call holds OUT (its own open file: flock refuses)
  first.acquire()
  try:
    held = tree(out)
    with pytest.raises(lock_lib.WorkdirLockedError, match="use another --out"):
      suite.run_all(out, ["a"], "test", verbose=False)
    assert tree(out) == held
  finally:
    first.release()
