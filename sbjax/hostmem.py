"""Host memory for training on CPU: freed memory is kept for reuse, not returned to the kernel.

XLA:CPU allocates the temporaries of a step as one block from an executor thread's malloc
arena and frees it when the step ends (459 MB for the pythia-14m train step at 8×256 tokens:
the head's V×chunk logits and softmax). glibc serves a block that large, in a thread arena,
with ``mmap`` and returns it with ``munmap`` on free, so every step faults all of its pages
in again: 118k minor page faults and 0.37 s of system CPU per pythia-14m step (of 2.4 s of
CPU in all), measured with ``getrusage``. With

    M_ARENA_MAX = 1        every thread allocates from the main (brk-grown) heap,
    M_MMAP_MAX = 0         no chunk is mmap'd,
    M_TRIM_THRESHOLD = −1  the heap is never trimmed (a freed top is not given back),

the block is reused from step to step: 0.05 s of system CPU and 0–24k faults per step.

``keep_freed_host_memory()`` sets these with ``mallopt`` when the environment asks for it
(``SBJAX_KEEP_HOST_MEMORY=1``; off by default, because of the memory cost below and because it
changes the allocator of the whole process) and JAX will compute on the CPU (``JAX_PLATFORMS``
starts with ``cpu``, or is unset and no TPU/GPU plugin is installed). It is a no-op outside
glibc and on accelerators (whose step temporaries live on the device, and whose host input
pipelines keep glibc's per-thread arenas). It acts only on threads that have
not yet allocated (a thread that already has its own arena keeps it, and with one arena
allowed, later threads may share that one), so it must run before other threads start
(JAX's CPU client): the command-line entry points call it first
(``sbjax.cli.common.run_script``, before JAX starts its backend; importing sbjax does not). The cost: the process keeps its peak heap
resident: pythia-14m, 8×256 tokens, 2.07 GB RSS from the 4th step on (0 faults) against
1.15–1.21 GB (118k faults per step) without; the heap holds about three step blocks, because
the next step is dispatched before the last one's block is freed. Long CPU training runs that
can afford that memory gain 10-15% of step CPU.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform

ENV = "SBJAX_KEEP_HOST_MEMORY"
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8  # glibc <malloc.h>
_SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))  # -1: never trim
_applied: bool | None = None
_ACCELERATOR_PLUGINS = ("libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm7_plugin",
                        "jax_plugins")


def cpu_is_the_device() -> bool:
  """Whether JAX will compute on the CPU, decided without starting JAX: ``JAX_PLATFORMS``'s
  first entry, else no accelerator plugin importable."""
  platforms = os.environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  return not any(importlib.util.find_spec(m) is not None for m in _ACCELERATOR_PLUGINS)


def keep_freed_host_memory() -> bool:
  """Configure glibc malloc (once per process) to keep freed memory; True if applied."""
  global _applied
  if _applied is None:
    _applied = False
    if (os.environ.get(ENV, "0") == "1" and platform.libc_ver()[0] == "glibc"
        and cpu_is_the_device()):
      try:
        mallopt = ctypes.CDLL(None).mallopt
      except (OSError, AttributeError):  # no glibc symbols in this process
        return False
      mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
      _applied = all(mallopt(param, value) == 1 for param, value in _SETTINGS)
  return _applied
