"""The environment of JAX subprocesses with fake CPU devices, and the multi-device test's config."""

from __future__ import annotations

import os
import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The test config: the `tiny` preset with n_heads=8 (tiny has 2) so that a tensor axis
# really shards the attention heads (rotary_pct=0.5 keeps an even number of rotary dims of
# head_dim=4), 3 steps, checkpoints at 0 and 3 only.
TEST_OVERRIDES = {
    "model": {"n_heads": 8, "rotary_pct": 0.5},
    "train": {"steps": 3, "log_every": 1, "eval_every": 3, "eval_batches": 1,
              "ckpt_log_spaced": False, "ckpt_every": 3},
}


def env(n_devices: int = 8) -> dict:
  """Environment for a JAX subprocess with ``n_devices`` fake CPU devices (and the session's
  compilation cache, tests/conftest.py)."""
  e = dict(os.environ)
  e.update({
      "JAX_PLATFORMS": "cpu",
      "XLA_FLAGS": " ".join([*(f for f in e.get("XLA_FLAGS", "").split()
                                if "xla_force_host_platform_device_count" not in f),
                             f"--xla_force_host_platform_device_count={n_devices}"]),
      "TF_CPP_MIN_LOG_LEVEL": "3",
      "PYTHONPATH": str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
  })
  return e


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_config():
  """The Config of the multi-device test: tiny + TEST_OVERRIDES."""
  from sbjax import configs  # noqa: PLC0415
  from sbjax.config import Config  # noqa: PLC0415

  d = configs.get("tiny").to_dict()
  for k, v in TEST_OVERRIDES.items():
    d[k].update(v)
  return Config.from_dict(d)
