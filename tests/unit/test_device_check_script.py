"""benchmarks/device_check.sh: shellcheck-clean, and a bad argument is refused (the dry run
itself is tests/e2e/test_device_check.py)."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.sh"


def test_device_check_lint_and_bad_argument():
  if shutil.which("shellcheck") is None:
    pytest.skip("shellcheck is not installed (CI installs it)")
  lint = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
  assert lint.returncode == 0, lint.stdout
  bad = subprocess.run(["bash", str(SCRIPT), "--nope"], capture_output=True, text=True)
  assert bad.returncode == 2 and "unknown argument '--nope'" in bad.stderr
