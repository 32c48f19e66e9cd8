"""Test set-up: the platform (``SBJAX_TEST_PLATFORM``, default cpu), quiet logs, the shared tiny run."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
  sys.path.insert(0, str(ROOT))

from tests._xla import TEST_XLA_FLAGS, platform_under_test  # noqa: E402  (needs ROOT on sys.path)

PLATFORM = platform_under_test()
_asked = os.environ.get("JAX_PLATFORMS", "")
if _asked and {"gpu": "cuda"}.get(_asked.split(",")[0], _asked.split(",")[0]) != PLATFORM:
  raise pytest.UsageError(
      f"JAX_PLATFORMS={_asked} but the tests run on {PLATFORM!r}: set "
      f"SBJAX_TEST_PLATFORM={_asked.split(',')[0]} to test on that platform (cpu, cuda, tpu), "
      "or unset JAX_PLATFORMS")
os.environ["JAX_PLATFORMS"] = _asked or PLATFORM
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("NO_GCE_CHECK", "true")  # no gs:// client waits ~15 s for a GCE server
# A test worker has one core: numpy's, scipy's and torch's BLAS and OpenMP pools get one thread
# each (two workers' multi-threaded OpenBLAS on 2 cores spin against each other: the 50,000²
# sparse W-error test took 7.4 s of CPU with two copies running, 0.3 s with one thread each).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
  os.environ.setdefault(_var, "1")
if PLATFORM == "cuda":  # xdist workers share one GPU: no process may take 75% of it up front
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# XLA's CPU backend tuned for compile time (most of the time of tiny-model tests; tests/_xla.py):
# results move by float rounding at most, and every bitwise comparison compares runs made with
# the same flags. Set XLA_FLAGS yourself to test others; accelerators get XLA's defaults.
if PLATFORM == "cpu" and "XLA_FLAGS" not in os.environ:
  os.environ["XLA_FLAGS"] = TEST_XLA_FLAGS

# One scratch folder per session (inherited by xdist workers and subprocesses), removed at
# exit: TMPDIR and the persistent XLA compilation cache (many tests compile the same tiny
# step). pytest's own tmp_path folders stay in the system's temp folder, kept as pytest keeps
# them, for a failure to be looked into.
if "SBJAX_TESTS_SCRATCH" not in os.environ:
  import atexit
  import shutil
  import tempfile

  os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
  _scratch = tempfile.mkdtemp(prefix="sbjax_tests_")
  atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
  os.environ["SBJAX_TESTS_SCRATCH"] = os.environ["TMPDIR"] = tempfile.tempdir = _scratch
  if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ.update(JAX_COMPILATION_CACHE_DIR=os.path.join(_scratch, "jax_cache"),
                      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


# Layers: tests/unit (pure functions, small jits), tests/integration (real parts wired
# together: orbax on disk, subprocess meshes, tokenizers), tests/e2e (whole experiments and
# CLIs). Each test gets the marker of its folder, so `-m "not e2e"` is the fast layer. A test
# in unit/ or integration/ that starts a command-line process (a fresh interpreter: JAX start-up
# plus compiles) also carries @pytest.mark.e2e, beside the tests of the same part it checks.
LAYERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
  for item in items:
    parts = Path(str(item.fspath)).parts
    for layer in LAYERS:
      if layer in parts:
        item.add_marker(getattr(pytest.mark, layer))
    skip = _platform_skip(item)
    if skip is not None:
      item.add_marker(skip)


def _platform_skip(item):
  """``@pytest.mark.only_on("cpu", ..., reason="why")``: a skip on the other platforms."""
  mark = item.get_closest_marker("only_on")
  if mark is None or PLATFORM in mark.args:
    return None
  if not set(mark.args) <= {"cpu", "cuda", "tpu"} or not mark.kwargs.get("reason"):
    raise pytest.UsageError(f"{item.nodeid}: only_on takes platforms among cpu, cuda, tpu and a "
                            f"reason=..., got {mark.args} {mark.kwargs}")
  return pytest.mark.skip(reason=f"only on {', '.join(mark.args)} ({mark.kwargs['reason']}); "
                                 f"SBJAX_TEST_PLATFORM={PLATFORM}")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
  """The workdir of a 24-step tiny run (``tests/_tiny.py``), trained once per session, for
  tests that only need *a* run: read it or copy it, never train into it."""
  from sbjax.train import train
  from tests._tiny import tiny_dataset, tiny_run_config

  wd = tmp_path_factory.mktemp("tiny_run") / "run"
  train(tiny_run_config(), wd, dataset=tiny_dataset(), quiet=True)
  return wd
