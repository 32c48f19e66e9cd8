"""Import each named module alone, in a forked child of an interpreter that has loaded only
third-party packages (used by test_structure.py). Usage: _import_alone.py ROOT MODULE..."""

import importlib
import multiprocessing as mp
import sys


def _child(name, queue):
  try:
    loaded = [m for m in sys.modules if m == "sbjax" or m.startswith("sbjax.")]
    if loaded:
      raise RuntimeError(f"the parent loaded {loaded}")
    importlib.import_module(name)
    queue.put(None)
  except BaseException as e:  # noqa: BLE001 - reported to the parent
    queue.put(f"{type(e).__name__}: {e}")


def main(root: str, names: list[str]) -> int:
  sys.path.insert(0, root)
  import flax, jax, numpy, optax, orbax.checkpoint, scipy  # noqa: F401,E401 - third party only

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
