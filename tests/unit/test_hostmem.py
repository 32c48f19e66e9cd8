"""sbjax.hostmem: with the allocator set, a large block freed by a thread is reused by the next
step without page faults; without it (SBJAX_KEEP_HOST_MEMORY=0) glibc unmaps it and every
reuse faults its pages in again. Fresh interpreters, no JAX (ctypes malloc/memset only)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import ctypes, resource, sys, threading
from sbjax import hostmem
applied = hostmem.keep_freed_host_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
N = 96 << 20  # a step's temporaries: larger than a thread arena's 64 MB heap
faults = []

def step():  # allocate, touch every page, free: what an XLA:CPU executor thread does per step
  a = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
  p = libc.malloc(N)
  ctypes.memset(p, 1, N)
  libc.free(p)
  faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - a)

def worker():
  for _ in range(3):
    step()

t = threading.Thread(target=worker)
t.start(); t.join()
print(int(applied), faults[-1])
"""


def _probe(keep: str | None, **more) -> tuple[int, int]:
  env = {"PATH": "/usr/bin:/bin", **({} if keep is None else {"SBJAX_KEEP_HOST_MEMORY": keep}),
         **more}
  out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                       env=env, cwd=str(ROOT),
                       check=True).stdout.split()
  return int(out[0]), int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's")
@pytest.mark.only_on("cpu", reason="counts the host page faults of XLA:CPU's step temporaries; "
                     "sbjax sets the allocator only when JAX computes on the CPU")
def test_freed_step_block_is_reused_without_page_faults():
  pages = (96 << 20) // 4096
  applied, faults = _probe("1")
  assert applied == 1
  assert faults < pages // 20, f"{faults} page faults on the 3rd reuse of a {pages}-page block"
  applied, faults = _probe("0")  # the glibc default: unmapped on free, faulted in each step
  assert applied == 0
  assert faults > pages // 2
  assert _probe(None)[0] == 0  # opt-in: unset means glibc's default
  assert _probe("1", JAX_PLATFORMS="cuda")[0] == 0  # JAX computes on an accelerator
