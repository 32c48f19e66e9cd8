"""The platform the tests run on and the XLA flags of the CPU test suite, in one place for
tests/conftest.py and for the tests that run a subprocess without them.

``SBJAX_TEST_PLATFORM=cpu|cuda|tpu`` (default ``cpu``) chooses the platform: tests/conftest.py
sets ``JAX_PLATFORMS`` to it, sets :data:`TEST_XLA_FLAGS` on the CPU only, and skips the tests
marked ``only_on(...)`` that the platform is not named in (the marker gives the reason).
"""

import os

PLATFORMS = ("cpu", "cuda", "tpu")

# --xla_cpu_parallel_codegen_split_count=1: one LLVM module per program instead of XLA's split
# for parallel code generation (a test worker has one core; the split only adds per-module
# work): 3 tiny 2-step runs' CPU time 11.8-12.2 -> 10.4-10.9 s (BUILD_NOTES, test suite).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                  "--xla_cpu_parallel_codegen_split_count=1")


def platform_under_test() -> str:
  """The platform of this test session: ``SBJAX_TEST_PLATFORM`` (default ``cpu``), checked."""
  name = os.environ.get("SBJAX_TEST_PLATFORM", "").strip().lower() or "cpu"
  if name not in PLATFORMS:
    raise ValueError(f"SBJAX_TEST_PLATFORM={name!r} is not a test platform; use one of "
                     f"{', '.join(PLATFORMS)} (default cpu)")
  return name

