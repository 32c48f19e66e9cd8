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
