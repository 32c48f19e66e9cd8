"""``python -m tests._cli_fork JSON``: each ``[module, arg, ...]`` run as ``python -m`` in a forked child."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import tempfile
import traceback

import jax  # noqa: F401 - the shared imports, before the forks
import matplotlib  # noqa: F401
import sbjax.analysis  # noqa: F401
import sbjax.train  # noqa: F401
from jax._src import xla_bridge


def _exit_code(e: SystemExit) -> int:
  """The exit status of ``SystemExit(e.code)`` as the interpreter gives it (a message: 1)."""
  if e.code is None or isinstance(e.code, int):
    return e.code or 0
  print(e.code, file=sys.stderr)
  return 1


def _child(cmd: list[str], out_path: str, err_path: str) -> None:
  """In a child: stdout/stderr into the files, run ``cmd`` as ``python -m``, exit with its
  status."""
  for fd, path in ((1, out_path), (2, err_path)):
    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(f, fd)
    os.close(f)
  rc = 0
  sys.argv = list(cmd)
  try:
    runpy.run_module(cmd[0], run_name="__main__", alter_sys=True)
  except SystemExit as e:
    rc = _exit_code(e)
  except BaseException:  # noqa: BLE001 - reported as the interpreter would, status 1
    traceback.print_exc()
    rc = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(rc)


def main(commands: list[list[str]]) -> list[dict]:
  for cmd in commands:
    importlib.import_module(cmd[0])  # the command's package (its __main__ runs in the child)
  if xla_bridge.backends_are_initialized():
    raise RuntimeError("an import started JAX's backend: forked children would share its "
                       "threads; run these commands as separate processes")
  tmp, results = tempfile.mkdtemp(prefix="sbjax_cli_fork_"), []
  for i, cmd in enumerate(commands):
    out, err = os.path.join(tmp, f"{i}.out"), os.path.join(tmp, f"{i}.err")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      try:
        _child(cmd, out, err)
      finally:
        os._exit(1)  # never back into the parent's loop
    _, status = os.waitpid(pid, 0)  # one at a time: the machine's cores are shared
    with open(out) as o, open(err) as e:
      results.append({"rc": os.waitstatus_to_exitcode(status), "stdout": o.read(),
                      "stderr": e.read()})
  return results


if __name__ == "__main__":
  sys.__stdout__.write(json.dumps(main(json.loads(sys.argv[1]))))
