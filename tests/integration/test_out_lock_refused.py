"""A refused or failed call leaves no empty folder behind (``sbjax.train.lock.workdir_lock``,
which ``out_lock`` is): the folders the call created (its --out, their missing parents) that
hold nothing once the lock is released are removed, on local disk and on ``gs://`` (fsspec's
in-memory file system, tests/_fake_gcs.py, in a real process running the real CLI). A folder
that existed before, or that holds anything (partial results a rerun resumes from), is kept
byte for byte. And ``experiments.reproduce``'s werror_loss holds the lock of the head-rank
sweep it reads (OUT/head_rank): a holder of that folder stops it, nothing is read or written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sbjax.train import lock as lock_lib
from tests._fake_gcs import FakeGCS, fake_gcs
from tests.integration.test_out_lock import ROOT, _busy_line, holding, tree

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV, capture_output=True,
                        text=True, timeout=300)


def last_line(r) -> str:
  return [ln for ln in r.stderr.splitlines() if ln.strip()][-1]


@pytest.mark.e2e  # starts CLI processes (the e2e layer; tests/conftest.py)
def test_refused_calls_leave_no_folder_and_keep_what_was_there(tmp_path):
  """collapse (refused after its --out lock is taken) into a fresh folder two levels deep,
  target_rank into an existing folder with a file (refused on its corpus; it made OUT/parts
  before), werror_loss (refused on its corpus, under both its --out and --head_rank_dir locks)
  and analyze (a workdir that is no run; its OUT is WORKDIR/analysis): exit 2, one error line,
  and the tree is as before the call, byte for byte: every new folder gone, parents included,
  the existing folder and its file untouched."""
  keep = tmp_path / "keep"
  keep.mkdir()
  (keep / "result.csv").write_text("rank,eval_loss\n4,2.5\n")
  (tmp_path / "norun").mkdir()
  missing = tmp_path / "no_corpus"
  before = tree(tmp_path)
  for args, error in (
      (["experiments.collapse", "--preset=bogus", f"--out={tmp_path}/fresh/a/b"],
       "error: unknown collapse preset 'bogus'"),
      (["experiments.target_rank", "--preset=test", f"--data={missing}", f"--out={keep}"],
       f"error: corpus directory not found (--data={missing})"),
      (["experiments.werror_loss", "--preset=test", f"--data={missing}", f"--out={tmp_path}/w/o",
        f"--head_rank_dir={tmp_path}/w/hr"], f"error: corpus directory not found (--data={missing})"),
      (["experiments.analyze", f"--workdir={tmp_path}/norun"], "error: ")):
    r = cli(*args)
    assert r.returncode == 2 and r.stdout == "", (args, r.returncode, r.stderr[-2000:])
    assert last_line(r).startswith(error), (args, r.stderr[-2000:])
    assert tree(tmp_path) == before, args


@pytest.mark.e2e  # starts a CLI process
def test_a_failed_reproduce_keeps_its_report_and_drops_its_empty_folders(tmp_path):
  """``experiments.reproduce`` whose one experiment (werror_loss) fails on a missing corpus:
  the call ends with an error, keeps what it wrote (timings.json, report.md naming the
  failure) and leaves no empty OUT/werror_loss or OUT/head_rank (the sweep folder it locks)."""
  out, missing = tmp_path / "rep", tmp_path / "no_corpus"
  r = cli("experiments.reproduce", f"--out={out}", "--only=werror_loss", "--preset=test",
          f"--data={missing}")
  assert r.returncode == 2 and "experiment(s) failed: werror_loss" in last_line(r), r.stderr[-2000:]
  assert sorted(p.name for p in out.iterdir()) == ["report.md", "timings.json"]
  t = json.loads((out / "timings.json").read_text())["werror_loss"]
  assert t["status"] == "failed" and "corpus directory not found" in t["error"]
  assert "corpus directory not found" in (out / "report.md").read_text()


GS_CALL = """
import json, runpy, sys
from tests._fake_gcs import FakeGCS, fake_gcs
from sbjax.paths import upath
with fake_gcs() as store:
  upath("gs://bkt/keep").mkdir(parents=True)
  (upath("gs://bkt/keep") / "result.csv").write_bytes(b"a\\n1\\n")
  codes = []
  for out in ("gs://bkt/fresh", "gs://bkt/keep"):
    sys.argv = ["collapse", "--preset=bogus", "--out=" + out]
    try:
      runpy.run_module("experiments.collapse", run_name="__main__", alter_sys=True)
    except SystemExit as e:
      codes.append(e.code)
  print(json.dumps({"codes": codes, "objects": {k: bytes(v.getvalue()).decode()
                                                for k, v in store.items()},
                    "dirs": sorted(d for d in FakeGCS.pseudo_dirs if d.startswith("gs://bkt/fresh")),
                    "fresh": upath("gs://bkt/fresh").exists(),
                    "keep": upath("gs://bkt/keep").is_dir()}))
"""


@pytest.mark.e2e  # starts a CLI process
def test_a_refused_call_on_gs_leaves_no_folder(tmp_path):
  """The same refused collapse call into gs://bkt/fresh (a new folder) and gs://bkt/keep (one
  object): the first leaves no folder and no object, the second keeps its object's bytes."""
  r = subprocess.run([sys.executable, "-c", GS_CALL], cwd=ROOT, env=ENV, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert got == {"codes": [2, 2], "objects": {"gs://bkt/keep/result.csv": "a\n1\n"},
                 "dirs": [], "fresh": False, "keep": True}, (got, r.stderr[-2000:])
  assert r.stderr.count("error: unknown collapse preset 'bogus'") == 2


class Boom(RuntimeError):
  pass


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gs"])
def test_what_a_failed_call_wrote_is_kept_and_only_errors_clean_up(tmp_path, remote):
  """``out_lock`` itself: a failed block that wrote a file (or only a subfolder with a file)
  keeps it; a failed block that wrote nothing leaves no folder (nor the parents it made); a
  block that ends well (``sys.exit(0)``, ``sys.exit()``) keeps its empty folder; exit 75 (a
  budget stop) and ``sys.exit("text")`` are errors."""
  with fake_gcs() if remote else _nothing():
    base = lock_lib.upath("gs://bkt" if remote else tmp_path)
    ends = {"partial": Boom, "sub": Boom, "empty": Boom, "exit0": SystemExit(0),
            "exitnone": SystemExit(None), "exit75": SystemExit(75), "exittext": SystemExit("x")}
    for name, end in ends.items():
      out = base / name / "out"
      with pytest.raises(type(end) if isinstance(end, BaseException) else end):
        with lock_lib.out_lock(out, flag="--out"):
          if name == "partial":
            (out / "part.csv").write_text("a\n1\n")
          if name == "sub":
            (out / "runs" / "a").mkdir(parents=True)
            (out / "runs" / "a" / "ckpt").write_text("x")
          raise end
    assert (base / "partial" / "out" / "part.csv").read_text() == "a\n1\n"
    assert (base / "sub" / "out" / "runs" / "a" / "ckpt").read_text() == "x"
    for name in ("partial", "sub"):
      assert not (base / name / "out" / "LOCK").exists()
    assert (base / "exit0" / "out").is_dir() and (base / "exitnone" / "out").is_dir()
    for name in ("empty", "exit75", "exittext"):
      assert not (base / name).exists(), name
    if remote:  # a bucket is never among the folders a call made (nor removed)
      assert lock_lib.new_folders("gs://nobkt/a/b") == [lock_lib.upath("gs://nobkt/a/b"),
                                                        lock_lib.upath("gs://nobkt/a")]
    if remote:  # the in-memory store's folder markers (its "/gs://..." parent entries are
      # unreachable from gs:// paths: a quirk of the fake, which GCS, without folders, lacks)
      assert not [d for d in FakeGCS.pseudo_dirs
                  if d.startswith(("gs://bkt/empty", "gs://bkt/exit75", "gs://bkt/exittext"))]


class _nothing:
  def __enter__(self):
    return None

  def __exit__(self, *exc):
    return False


def test_reproduce_werror_loss_holds_the_sweep_folder_it_reads(tmp_path):
  """``experiments.reproduce``'s runner (``Suite.run_all``) runs werror_loss, which reads or
  trains OUT/head_rank: while another process holds that folder, werror_loss is reported failed
  with the busy line (naming --out, the option that chose the folder), and OUT/head_rank holds
  only the holder's LOCK (nothing read or written there; its corpus is not even looked at).
  werror_loss's own run, given the folder as --head_rank_dir, stops naming that option."""
  from experiments import werror_loss
  from experiments.reproduce import SUITE

  out = tmp_path / "rep"
  with holding(out / "head_rank") as p:
    held = tree(out / "head_rank")
    timings = SUITE.run_all(out, ["werror_loss"], "test", verbose=False,
                            data=str(tmp_path / "no_corpus"))
    assert timings["werror_loss"]["status"] == "failed"
    assert timings["werror_loss"]["error"] == (
        "WorkdirLockedError: " + _busy_line(out / "head_rank", p.pid, "--out"))
    assert tree(out / "head_rank") == held
    assert not (out / "werror_loss").exists()  # created by the runner's lock, left empty
    with pytest.raises(lock_lib.WorkdirLockedError) as e:  # the CLI's --head_rank_dir
      werror_loss.run(tmp_path / "w", "test", data=str(tmp_path / "no_corpus"),
                      head_rank_dir_=str(out / "head_rank"), verbose=False)
    assert str(e.value) == _busy_line(out / "head_rank", p.pid, "--head_rank_dir")
    assert tree(out / "head_rank") == held and not (tmp_path / "w").exists()
