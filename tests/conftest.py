"""Test set-up: CPU only, quiet logs. Tests that need 8 fake devices run in a subprocess
(XLA_FLAGS must be set before JAX starts), see tests/_subproc.py."""

import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
  sys.path.insert(0, str(ROOT))
SHAKESPEARE = ROOT.parent / "shared" / "data" / "shakespeare"

# A persistent XLA compilation cache shared by the tests of one session and their
# subprocesses: many tests compile the same tiny train step.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import tempfile

  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="sbjax_jax_cache_")
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


# Layers: tests/unit (pure functions, small jits), tests/integration (real parts wired
# together: orbax on disk, subprocess meshes, tokenizers), tests/e2e (whole experiments and
# CLIs). Each test gets the marker of its folder, so `-m "not e2e"` is the fast layer.
LAYERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
  import pytest

  for item in items:
    parts = Path(str(item.fspath)).parts
    for layer in LAYERS:
      if layer in parts:
        item.add_marker(getattr(pytest.mark, layer))
