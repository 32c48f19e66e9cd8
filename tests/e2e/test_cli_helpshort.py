"""Every flag that a command's messages ask for is listed by its ``--helpshort``.

The flags are read from the string literals (not the docstrings) of the modules whose messages
a command shows: ``--tokens``, ``--config.train.steps=..`` (needs ``--config.`` in the help),
``--data.*``; a flag named after another command (``experiments.convert --from_hf``) belongs to
that command. Each command's help comes from its own process (absl's flags are global)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a flag: `--name` or `--prefix.key`, not inside a word (models--org--name), not another
# command's (`convert --from_hf`, `sbjax-convert --to_hf`)
FLAG = re.compile(r"(?<![\w-])(?<!convert )--(?:\[no\])?([a-z][a-z0-9_]*)(\.[A-Za-z*]*)?")
ABSL = {"help", "helpshort", "helpfull"}
# flags of another command that a command's messages name on purpose, with that command
OTHERS = {"convert": {"config.": "train (train from an import: --config.train.init_from=DIR)",
                      "allow_duplicates": "analyze (which refuses duplicate revisions)"}}
EXPERIMENTS = ["collapse", "convergence", "head_rank", "mos_text", "planted", "saturation",
               "target_rank", "vocab_threshold", "werror_loss"]
SOURCES = {
    "train": ["sbjax/cli/train.py", "sbjax/cli/common.py", "sbjax/configs.py", "sbjax/overrides.py", "sbjax/train/*.py",
              "sbjax/sharding.py", "sbjax/attention.py", "sbjax/checkpoint.py",
              "sbjax/data/text.py"],
    "analyze": ["sbjax/cli/analyze.py", "sbjax/cli/data_flags.py", "sbjax/analysis/*.py",
                "sbjax/convert/integrity.py"],
    "convert": ["sbjax/cli/convert.py", "sbjax/convert/*.py"],
    "sweep": ["sbjax/cli/sweep.py", "sbjax/cli/common.py", "sbjax/sweep.py"],
    "reproduce": ["sbjax/cli/reproduce.py", "experiments/reproduce.py"],
    **{name: [f"experiments/{name}/*.py"] for name in EXPERIMENTS},
}
SERIES = {"collapse", "saturation"}  # their series mode takes the shared data flags
# (sbjax/cli/common.py: its distributed-flag messages are train's and sweep's, the programs
# that define those flags)


def _strings(path: Path):
  """The string literals of a module, less its docstrings."""
  tree = ast.parse(path.read_text())
  docs = {id(n.body[0].value) for n in ast.walk(tree)
          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
          and n.body and isinstance(n.body[0], ast.Expr)
          and isinstance(n.body[0].value, ast.Constant)}
  for n in ast.walk(tree):
    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
      yield n.value


def asked_flags(command: str) -> dict[str, str]:
  """{flag: the file whose messages name it}; ``config.`` stands for ``--config.KEY``."""
  globs = SOURCES[command]
  if command in SERIES:
    globs = globs + ["sbjax/cli/series_flags.py", "sbjax/cli/data_flags.py"]
  out = {}
  for pattern in globs:
    paths = sorted(ROOT.glob(pattern))
    assert paths, f"{pattern} matches no file: update SOURCES"
    for path in paths:
      for text in _strings(path):
        for m in FLAG.finditer(text):
          out.setdefault(m.group(1) + ("." if m.group(2) else ""), str(path.relative_to(ROOT)))
  return out


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
  """Each command's --helpshort: ``tests/_helpshort.py`` runs each as ``__main__`` in a
  process of its own, forked after the imports they share."""
  proc = subprocess.run([sys.executable, "-m", "tests._helpshort", *SOURCES], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout)


def listed(help_text: str) -> set[str]:
  """The flags a help text lists (``--name:`` lines, ``--[no]name``), and ``X.`` for every
  ``--X.KEY`` it shows."""
  names = set(re.findall(r"^\s+--(?:\[no\])?([a-z][a-z0-9_]*):", help_text, re.M))
  return names | {f"{p}." for p in re.findall(r"--([a-z][a-z0-9_]*)\.[A-Za-z]", help_text)}


@pytest.mark.parametrize("command", list(SOURCES))
def test_helpshort_lists_every_flag_the_messages_ask_for(helps, command):
  asked = asked_flags(command)
  shown = listed(helps[command])
  assert shown, f"experiments.{command} --helpshort printed no flags:\n{helps[command][-2000:]}"
  others = set(OTHERS.get(command, {}))
  missing = {f"--{f}": where for f, where in asked.items() if f not in shown | ABSL | others}
  assert not missing, f"experiments.{command} --helpshort does not list {missing}"


def test_the_scan_finds_the_flags_of_the_messages():
  """The scan itself: a message's flags are found, another command's and a word's are not."""
  text = ("pass --tokens=FILE or --data.source=text (experiments.convert --from_hf; "
          "models--org--name); set --config.train.steps; --[no]cache")
  found = {m.group(1) + ("." if m.group(2) else "") for m in FLAG.finditer(text)}
  assert found == {"tokens", "data.", "config.", "cache"}
