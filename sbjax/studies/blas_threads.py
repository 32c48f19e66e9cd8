"""Run numpy's BLAS on one thread inside a block (``single_thread_blas``).

The exact-floor fits (``sbjax.studies.floor``) multiply small matrices thousands of times; a
multi-threaded OpenBLAS on a busy 2-core machine is ~100x slower on them. The thread count
of every OpenBLAS loaded in the process (Linux: found in /proc/self/maps) is set to 1 and
restored after the block.
"""

from __future__ import annotations

import contextlib
import ctypes

_BLAS_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                 ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                 ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                 ("openblas_get_num_threads", "openblas_set_num_threads"))


def _openblas_handles() -> list:
  """(get, set) thread-count functions of every OpenBLAS loaded in this process (Linux)."""
  out, seen = [], set()
  try:
    maps = open("/proc/self/maps").read().split("\n")
  except OSError:
    return out
  for line in maps:
    path = line.split()[-1] if line.strip() else ""
    if "openblas" not in path.lower() or not path.endswith(".so") and ".so." not in path:
      continue
    if path in seen:
      continue
    seen.add(path)
    try:
      lib = ctypes.CDLL(path)
    except OSError:
      continue
    for get, set_ in _BLAS_SYMBOLS:
      if hasattr(lib, get) and hasattr(lib, set_):
        out.append((getattr(lib, get), getattr(lib, set_)))
        break
  return out


@contextlib.contextmanager
def single_thread_blas():
  """Runs numpy's BLAS on one thread (restored after). These fits multiply small matrices;
  a multi-threaded OpenBLAS on a busy 2-core machine is ~100x slower on them."""
  handles = _openblas_handles()
  old = [get() for get, _ in handles]
  for _, set_ in handles:
    set_(1)
  try:
    yield
  finally:
    for (_, set_), n in zip(handles, old):
      set_(max(int(n), 1))
