"""Nothing outside the head registry (sbjax/heads/) switches on the head's name: the grep of
issue 16, ``grep -rn 'cfg.head ==\\|\\.head == "' sbjax experiments``, finds nothing else."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATTERN = re.compile(r'cfg.head ==|\.head == "')


def test_no_head_name_switch_outside_the_registry():
  hits = []
  for folder in ("sbjax", "experiments"):
    for f in sorted((ROOT / folder).rglob("*.py")):
      rel = f.relative_to(ROOT).as_posix()
      if rel.startswith("sbjax/heads/"):
        continue
      for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
        if PATTERN.search(line):
          hits.append(f"{rel}:{i}: {line.strip()}")
  assert not hits, "ask sbjax.heads (get(name).<...>) instead of testing the head's name:\n" + \
      "\n".join(hits)
