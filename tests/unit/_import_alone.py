"""Import each named module alone, in a forked child of an interpreter that has loaded only
third-party packages (used by test_structure.py). Usage: _import_alone.py ROOT MODULE...

The parent first loads every third-party module that sbjax's imports pull in, so each child
pays only for sbjax's own modules: the check is about the order of sbjax's imports, and the
third-party imports would otherwise cost up to 0.5 s per child. Which modules those are is
found twice: the import statements under ROOT/sbjax that run at import time (read with
``ast``, outside function bodies; a ``from X import Y`` also names X.Y, often a lazily loaded
submodule such as jax's pallas kernels), and one probe
child that imports every named module and reports the non-sbjax modules that appeared
(matplotlib's backend, transformers' lazy parts). No sbjax module is ever loaded in the parent:
each child checks that first."""

import ast
import compileall
import importlib
import os
import signal
import sys
import tempfile
from pathlib import Path


def _own(name: str) -> bool:
  return name == "sbjax" or name.startswith("sbjax.")


def _child(name: str) -> str:
  loaded = [m for m in sys.modules if _own(m)]
  if loaded:
    return f"the parent loaded {loaded}"
  importlib.import_module(name)
  return ""


def _probe(names) -> str:
  """Import every module (failures are the real children's to report); the non-sbjax modules
  that appeared, in the order they were loaded, one a line."""
  before = set(sys.modules)
  for name in names:
    try:
      importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - each module's own child reports it
      pass
  return "\n".join(m for m in list(sys.modules) if m not in before and not _own(m))


def _forked(fn, arg) -> tuple[bool, str]:
  """``fn(arg)`` in a forked child: (it returned, what it returned or why it failed)."""
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: report, then leave without running the parent's exit handlers
    os.close(read)
    signal.alarm(120)  # a hung import ends the child (exit code -14), not the check
    code = 0
    try:
      out = fn(arg)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
      out, code = f"{type(e).__name__}: {e}", 1
    with os.fdopen(write, "w") as f:
      f.write(out)
    os._exit(code)
  os.close(write)
  with os.fdopen(read) as f:
    out = f.read()
  _, status = os.waitpid(pid, 0)
  code = os.waitstatus_to_exitcode(status)
  if code not in (0, 1):
    return False, f"exit code {code}"
  return code == 0, out


def _import_time_nodes(tree: ast.Module):
  """The nodes of a module that run when it is imported: all but the bodies of functions (a
  function-local ``deferred:`` import, e.g. torch for an allowed pickle, runs only when
  called; preloading it would make the parent, and so every fork, heavier for nothing)."""
  stack = list(tree.body)
  while stack:
    node = stack.pop()
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      yield node
      stack.extend(ast.iter_child_nodes(node))


def third_party(root: str) -> list[str]:
  """Modules named by the import-time import statements under ROOT/sbjax that are not sbjax's
  own, with ``X.Y`` for each ``from X import Y`` (Y may be a submodule)."""
  found = set()
  for path in sorted(Path(root, "sbjax").rglob("*.py")):
    for node in _import_time_nodes(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        found.update(a.name for a in node.names)
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        found.add(node.module)
        found.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
  return sorted(m for m in found if m.split(".")[0] not in ("sbjax", "__future__"))


def _preload(mods) -> None:
  for mod in mods:
    try:
      importlib.import_module(mod)
    except Exception:  # noqa: BLE001 - an extra not installed here, or X.Y is not a module
      pass


def _compile_once(root: str, cache: str) -> None:
  """Byte-compile sbjax into ``cache`` (not the source tree) and read it back from there: with
  PYTHONDONTWRITEBYTECODE set, each child would otherwise compile every module it imports
  (about a third of a child's time)."""
  sys.pycache_prefix, sys.dont_write_bytecode = cache, False
  compileall.compile_dir(str(Path(root, "sbjax")), quiet=1)


def main(root: str, names: list[str]) -> int:
  sys.path.insert(0, root)
  _preload(third_party(root))
  ok, extra = _forked(_probe, names)
  if ok:
    _preload(extra.splitlines())
  # after the preloads: a pycache prefix hides site-packages' own __pycache__ folders
  with tempfile.TemporaryDirectory(prefix="sbjax_pyc_") as cache:
    _compile_once(root, cache)
    bad = []
    for name in names:
      ok, err = _forked(_child, name)
      if not ok or err:
        bad.append(f"{name}: {err}")
  for line in bad:
    print("FAILED", line)
  print(f"imported {len(names) - len(bad)} modules alone, {len(bad)} failed" if bad
        else f"imported {len(names)} modules alone")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1], sys.argv[2:]))
