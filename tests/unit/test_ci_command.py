"""The README's test command is what .ci/run runs, and .ci/run installs nothing else."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_command_and_installs_nothing_else():
  blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
  found = [line.strip() for b in blocks for line in b.splitlines() if "pytest tests" in line]
  assert len(found) == 1, f"expected one README bash line running pytest tests, got {found}"
  ci = [line.strip() for line in (REPO / ".ci/run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")]
  installs = [line for line in ci if re.search(r"\b(apt-get|apt|pip|curl|wget)\b", line)]
  assert installs == found, f".ci/run does not run only the README's command {found}: {installs}"
