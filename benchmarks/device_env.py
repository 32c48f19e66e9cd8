"""What a device check ran on, as one JSON object (NOT a test; device_check.sh).

    python benchmarks/device_env.py KIND DRY_RUN ENV_JSON

Imports sbjax (it fails where sbjax's needs are missing: device_check.sh then installs the
carried wheels). Writes ENV_JSON and prints "N_DEVICES DEVICE_KIND" for the shell. ENV_JSON:
devices as jax sees them, the versions of python, jax, jaxlib, flax, optax, orbax, torch,
transformers, the GPU as ``nvidia-smi`` names it (driver, memory), the CPU count and the
commit where git can tell (a copied working tree has no .git: "unknown").
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import time


def version(dist: str) -> str | None:
  try:
    return md.version(dist)
  except md.PackageNotFoundError:
    return None


def command(*args: str) -> str | None:
  try:
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return p.stdout.strip() if p.returncode == 0 else None


def main():
  kind, dry, path = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
  import jax

  import sbjax  # noqa: F401  (what the device check needs; fails here, not in a section)

  devs = jax.devices()
  torch_cuda = None
  if kind != "cpu":  # (torch's import is seconds: not for the CPU dry run)
    try:
      import torch

      torch_cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else False
    except ImportError:
      pass
  env = {"kind": kind, "dry_run": dry, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                     time.gmtime()),
         "backend": jax.default_backend(), "n_devices": len(devs),
         "device": devs[0].device_kind, "python": platform.python_version(),
         "cpu_count": os.cpu_count(), "torch_sees_gpu": torch_cuda,
         "nvidia_smi": command("nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"),
         "commit": command("git", "rev-parse", "HEAD") or "unknown",
         **{d: version(d) for d in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "torch",
                                    "transformers", "numpy")}}
  with open(path, "w") as f:
    json.dump(env, f)
  print(len(devs), devs[0].device_kind)


if __name__ == "__main__":
  main()
