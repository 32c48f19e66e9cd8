"""tests/conftest.py gives each test session one scratch folder as its temp folder (TMPDIR,
inherited by xdist workers and subprocesses) and removes it when the session ends, so a run of
the suite leaves nothing in the system's temp folder but pytest's own kept tmp_path folders."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_temp_folder_is_the_session_scratch(tmp_path):
  scratch = os.environ["SBJAX_TESTS_SCRATCH"]
  assert tempfile.gettempdir() == scratch == os.environ["TMPDIR"]
  assert Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).parent == Path(scratch)
  assert not tmp_path.is_relative_to(scratch)  # pytest's folders are kept, outside it
  leak = Path(tempfile.mkdtemp(prefix="left_behind_"))  # what a walkthrough or TFDS leaves
  (leak / "f").write_text("x")


@pytest.mark.e2e
def test_a_session_leaves_only_pytests_folders_in_the_temp_folder(tmp_path):
  system_tmp = tmp_path / "tmp"
  system_tmp.mkdir()
  env = {k: v for k, v in os.environ.items()
         if k not in ("SBJAX_TESTS_SCRATCH", "JAX_COMPILATION_CACHE_DIR", "PYTEST_DEBUG_TEMPROOT",
                      "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST")}
  env["TMPDIR"] = str(system_tmp)
  test = f"{Path(__file__).relative_to(ROOT)}::test_the_temp_folder_is_the_session_scratch"
  r = subprocess.run([sys.executable, "-m", "pytest", test, "-q", "-p", "no:xdist",
                      "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode == 0, r.stdout + r.stderr  # (5 if the test was not found)
  left = sorted(p.name for p in system_tmp.iterdir())
  assert left == [next(p.name for p in system_tmp.glob("pytest-of-*"))], left
