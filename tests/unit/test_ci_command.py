"""The README's test command is what .ci/run runs, and .ci/run installs nothing else."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _readme_test_command() -> str:
  blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
  found = [line.strip() for b in blocks for line in b.splitlines() if "pytest tests" in line]
  assert len(found) == 1, f"expected one README bash line running pytest tests, got {found}"
  return found[0]


def test_ci_runs_the_readme_command_and_installs_nothing_else():
  command = _readme_test_command()
  ci = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")]
  assert command in ci, f".ci/run does not run the README's command {command!r}"
  installs = [line for line in ci if re.search(r"\b(apt-get|apt|pip|curl|wget)\b", line)]
  assert installs == [command], f".ci/run installs more than the README's command: {installs}"
