"""``python -m tests._helpshort CMD ...``: the ``--helpshort`` of each ``experiments.CMD``, as
JSON {CMD: text}. Each command runs as ``__main__`` (runpy) in its own forked process, absl's
flags being global; the heavy imports that every command shares are made once, before the
forks (about a tenth of the CPU time of one interpreter per command)."""

from __future__ import annotations

import io
import json
import os
import runpy
import sys
import tempfile

import jax  # noqa: F401 - the shared imports, before the forks
import matplotlib  # noqa: F401
import sbjax.analysis  # noqa: F401
import sbjax.train  # noqa: F401


def _help(command: str, path: str) -> None:
  """In a child: run experiments.COMMAND --helpshort as __main__, its stdout into ``path``."""
  out = io.StringIO()
  sys.stdout = sys.stderr = out
  sys.argv = [f"experiments.{command}", "--helpshort"]
  try:
    runpy.run_module(f"experiments.{command}", run_name="__main__", alter_sys=True)
  except SystemExit:
    pass
  finally:
    with open(path, "w") as f:
      f.write(out.getvalue())
  os._exit(0)


def main(commands: list[str]) -> None:
  tmp, pids = tempfile.mkdtemp(), {}
  for c in commands:
    pid = os.fork()
    if pid == 0:
      _help(c, os.path.join(tmp, c))
    os.waitpid(pid, 0)  # one at a time: the machine's cores are shared
    pids[c] = pid
  out = {}
  for c in commands:
    with open(os.path.join(tmp, c)) as f:
      out[c] = f.read()
  sys.__stdout__.write(json.dumps(out))


if __name__ == "__main__":
  main(sys.argv[1:])
