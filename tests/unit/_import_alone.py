"""Import each named module alone, in a forked child of an interpreter that has loaded only
third-party packages (used by test_structure.py). Usage: _import_alone.py ROOT MODULE...

The parent first imports every third-party module that a file under ROOT/sbjax names in an
import statement (found with ``ast``), so each child pays only for sbjax's own modules: the
check is about the order of sbjax's imports, and the third-party imports (matplotlib,
tensorflow_datasets, scipy submodules, ...) would otherwise cost ~2 s per child."""

import ast
import importlib
import multiprocessing as mp
import sys
from pathlib import Path


def _child(name, queue):
  try:
    loaded = [m for m in sys.modules if m == "sbjax" or m.startswith("sbjax.")]
    if loaded:
      raise RuntimeError(f"the parent loaded {loaded}")
    importlib.import_module(name)
    queue.put(None)
  except BaseException as e:  # noqa: BLE001 - reported to the parent
    queue.put(f"{type(e).__name__}: {e}")


def third_party(root: str) -> list[str]:
  """Modules named by import statements under ROOT/sbjax that are not sbjax's own."""
  found = set()
  for path in sorted(Path(root, "sbjax").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        found.update(a.name for a in node.names)
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        found.add(node.module)
  return sorted(m for m in found if m.split(".")[0] not in ("sbjax", "__future__"))


def main(root: str, names: list[str]) -> int:
  sys.path.insert(0, root)
  for mod in third_party(root):
    try:
      importlib.import_module(mod)
    except ImportError:  # an optional dependency (an extra) that is not installed here
      pass

  ctx = mp.get_context("fork")
  bad = []
  for name in names:
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, queue))
    proc.start()
    proc.join(120)
    err = queue.get(timeout=10) if proc.exitcode == 0 else f"exit code {proc.exitcode}"
    if err:
      bad.append(f"{name}: {err}")
  for line in bad:
    print("FAILED", line)
  print(f"imported {len(names) - len(bad)} modules alone, {len(bad)} failed" if bad
        else f"imported {len(names)} modules alone")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1], sys.argv[2:]))
