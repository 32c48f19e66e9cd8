"""One writer per experiment output folder (issue: the experiments' --out lock). A real second
process holds ``out_lock(OUT)`` (``sbjax.train.lock``; ``OUT/LOCK``) while this one calls
``python -m experiments.head_rank --out=OUT`` (and ``experiments.analyze``, whose OUT is
WORKDIR/analysis): the call stops with one line naming the folder, the holder and what to do,
exit status 2, and leaves every file as it was. After the
holder is killed with SIGKILL the next caller takes the folder. The folder's own training
workdirs (``OUT/runs/<arm>``) take their own locks beside it, and ``experiments.reproduce``'s
runner locks OUT and each OUT/NAME."""

from __future__ import annotations

import contextlib
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
# The holder loads sbjax/train/lock.py alone (the same code, without sbjax.train's JAX imports:
# 0.3 s of CPU instead of 2 s a process).
HOLD = ("import contextlib, importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('lock', 'sbjax/train/lock.py')\n"
        "lock = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(lock)\n"
        "with contextlib.ExitStack() as st:\n  for d in sys.argv[1:]:\n"
        "    st.enter_context(lock.out_lock(d, flag='--out'))\n  print('held', flush=True)\n"
        "  sys.stdin.read()\n")  # until the test closes stdin


def tree(root: Path) -> dict:
  """Every path under ``root``: a file's sha256, a folder's "dir" (a new empty folder counts)."""
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


@contextlib.contextmanager
def holding(*folders):
  """A second process holding ``out_lock`` of each folder until it is killed or the block
  ends (its stdin closes); yields the process."""
  p = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, folders)], cwd=ROOT, text=True,
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    assert p.stdout.readline().strip() == "held"
    yield p
  finally:
    p.communicate(timeout=60)  # stdin closed: a live holder releases and exits


def _busy_line(out, pid: int, flag: str = "--out") -> str:
  info = json.loads((Path(out) / "LOCK").read_text())
  assert info["pid"] == pid and info["host"] == socket.gethostname()
  return (f"the output folder {out} is in use by another run (host {info['host']}, pid {pid}, "
          f"started {info['started']}); wait for it to finish, stop it (kill {pid} on "
          f"{info['host']}), or use another {flag}")


@pytest.mark.e2e  # starts CLI processes (the e2e layer; tests/conftest.py)
def test_second_calls_into_held_folders_stop_before_writing(tmp_path):
  """``experiments.head_rank --out=OUT`` and ``experiments.analyze --workdir=W`` (its output
  W/analysis) while another process holds them: exit 2, one error line, nothing written."""
  out, wd = tmp_path / "out", tmp_path / "run"
  with holding(out, wd / "analysis") as p:
    (out / "head_rank.csv").write_text("rank,eval_loss\n4,2.5\n")  # the holder's results
    before = tree(tmp_path)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for cmd, folder, flag in (
        (["experiments.head_rank", "--preset=test", f"--out={out}"], out, "--out"),
        (["experiments.analyze", f"--workdir={wd}"], wd / "analysis", "--out_dir")):
      r = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
      assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr[-2000:])
      lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
      assert lines[-1] == "error: " + _busy_line(folder, p.pid, flag), r.stderr[-2000:]
    assert tree(tmp_path) == before  # the CSV and the holder's LOCKs, byte for byte; no new path


def test_after_the_holder_is_killed_the_next_caller_takes_the_folder(tmp_path, caplog):
  out = tmp_path / "out"
  with holding(out) as p:
    _killed_holder(p, out, caplog)


def _killed_holder(p, out: Path, caplog) -> None:
  (out / "kept.csv").write_text("a\n1\n")
  with pytest.raises(lock_lib.WorkdirLockedError) as e:
    with lock_lib.out_lock(out, flag="--out"):
      pytest.fail("the lock of a live holder was taken")
  assert str(e.value) == _busy_line(out, p.pid)
  os.kill(p.pid, signal.SIGKILL)
  p.wait()
  assert (out / "LOCK").exists()  # no chance to delete it: the next caller finds it stale
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    with lock_lib.out_lock(out, flag="--out"):
      assert json.loads((out / "LOCK").read_text())["pid"] == os.getpid()
  assert any(f"pid {p.pid}" in r.getMessage() and "took over the stale lock" in r.getMessage()
             for r in caplog.records)
  assert not (out / "LOCK").exists() and (out / "kept.csv").read_text() == "a\n1\n"


def test_the_out_lock_and_its_runs_workdir_locks_are_separate(tmp_path):
  """OUT/LOCK and OUT/runs/<arm>/LOCK: other files, other keys; a run that trains in OUT itself
  re-enters the out lock (one process)."""
  out, arm = tmp_path / "out", tmp_path / "out" / "runs" / "a"
  with lock_lib.out_lock(out, flag="--out"):
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
  with holding(out / "b") as p:
    timings = suite.run_all(out, ["a", "b"], "test", verbose=False)
    assert timings["a"]["status"] == "ok" and (out / "a" / "result.csv").exists()
    assert timings["b"] == {**timings["b"], "status": "failed",
                            "error": "WorkdirLockedError: " + _busy_line(out / "b", p.pid)}
    assert sorted(x.name for x in (out / "b").iterdir()) == ["LOCK"]
    assert not (out / "LOCK").exists()  # released at the end of the call
  first = lock_lib.LocalLock(out)  # another call holds OUT (its own open file: flock refuses)
  first.acquire()
  try:
    held = tree(out)
    with pytest.raises(lock_lib.WorkdirLockedError, match="use another --out"):
      suite.run_all(out, ["a"], "test", verbose=False)
    assert tree(out) == held
  finally:
    first.release()
