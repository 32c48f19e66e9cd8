"""The platform under test and the CPU suite's XLA flags, for conftest.py and subprocesses."""

import os
import re
from importlib import metadata

PLATFORMS = ("cpu", "cuda", "tpu")


def jaxlib_before(major: int, minor: int) -> bool:
  """Whether the installed jaxlib is known to be older than ``major.minor`` (read from its
  package metadata, without starting JAX); False where no jaxlib version can be read."""
  try:
    found = re.match(r"(\d+)\.(\d+)", metadata.version("jaxlib"))
  except metadata.PackageNotFoundError:
    return False
  return found is not None and (int(found[1]), int(found[2])) < (major, minor)


# The flags of a dry run of the device scripts (benchmarks/device_*.sh print DRY_XLA_FLAGS):
# LLVM -O0 and, before jaxlib 0.11, XLA's legacy elemental emitters instead of its MLIR fusion
# emitters. jaxlib 0.11 has the fusion emitters alone and exits on the flag ("Unknown flag in
# XLA_FLAGS: --xla_cpu_use_fusion_emitters=false"), so it is passed only to an older jaxlib.
DRY_XLA_FLAGS = "--xla_backend_optimization_level=0" + (
    " --xla_cpu_use_fusion_emitters=false" if jaxlib_before(0, 11) else "")

# --xla_cpu_parallel_codegen_split_count=1: one LLVM module per program instead of XLA's split
# for parallel code generation (a test worker has one core; the split only adds per-module
# work): 3 tiny 2-step runs' CPU time 11.8-12.2 -> 10.4-10.9 s (BUILD_NOTES, test suite).
TEST_XLA_FLAGS = DRY_XLA_FLAGS + " --xla_cpu_parallel_codegen_split_count=1"


def platform_under_test() -> str:
  """The platform of this test session: ``SBJAX_TEST_PLATFORM`` (default ``cpu``), checked."""
  name = os.environ.get("SBJAX_TEST_PLATFORM", "").strip().lower() or "cpu"
  if name not in PLATFORMS:
    raise ValueError(f"SBJAX_TEST_PLATFORM={name!r} is not a test platform; use one of "
                     f"{', '.join(PLATFORMS)} (default cpu)")
  return name

