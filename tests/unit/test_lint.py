"""The tree passes ruff and import-linter (the one-way flow of the layers, no import cycle)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*cmd):
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff():
  r = _run(sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise", ".")
  assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_import_contracts():
  r = _run(shutil.which("lint-imports") or "lint-imports", "--no-cache")
  assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
