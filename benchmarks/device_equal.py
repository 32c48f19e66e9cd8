"""1-vs-N-device equality on this machine's devices (NOT a test; device_check.sh runs it).

The tiny config (vocab 64) is trained ``--steps`` steps twice from the same init and data:
on one device, and on all N devices with the mesh (data, fsdp, tensor) = (-1, ``--fsdp``,
``--tensor``). Prints one ``BENCH`` JSON line: the largest |loss difference| over the
logged steps and the largest |parameter difference| at the end, in float32.

    PYTHONPATH=. python benchmarks/device_equal.py --steps=3
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import _bench  # noqa: F401
import jax
import numpy as np
from _bench import emit

from sbjax import checkpoint as ckpt
from sbjax import configs
from sbjax import sharding as shd
from sbjax.config import MeshConfig
from sbjax.data import make_dataset
from sbjax.train import train
from sbjax.train.workdir import read_metrics


def run(cfg, workdir: Path, devices, dataset) -> tuple[list, dict]:
  mesh = shd.make_mesh(cfg.mesh, devices)
  train(cfg, workdir, dataset=dataset, mesh=mesh, quiet=True, tensorboard=False)
  losses = [r["loss"] for r in read_metrics(workdir) if "loss" in r]
  _, params, _ = ckpt.load_params(workdir, cfg.train.steps)
  return losses, jax.tree.map(np.asarray, params)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--fsdp", type=int, default=1)
  ap.add_argument("--tensor", type=int, default=1)
  a = ap.parse_args()
  cfg = configs.load("tiny")
  n = jax.device_count()
  cfg = cfg.replace(
      model=dataclasses.replace(cfg.model, vocab_size=64),
      train=dataclasses.replace(cfg.train, steps=a.steps, log_every=1, eval_every=a.steps,
                                eval_batches=1, ckpt_every=a.steps, ckpt_log_spaced=False,
                                batch_size=8 * max(1, n // 8) if n > 8 else 8))
  tc = cfg.train
  data = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=None)  # one planted language for both runs
  with tempfile.TemporaryDirectory() as tmp:
    one = run(cfg.replace(mesh=MeshConfig(1, 1, 1)), Path(tmp) / "one", jax.devices()[:1], data)
    many = run(cfg.replace(mesh=MeshConfig(-1, a.fsdp, a.tensor)), Path(tmp) / "many",
               jax.devices(), data)
  dl = float(np.max(np.abs(np.subtract(one[0], many[0]))))
  dp = max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(one[1]),
                                                         jax.tree.leaves(many[1])))
  emit({"bench": "device_equal", "devices": n, "platform": jax.default_backend(),
        "mesh": [n // (a.fsdp * a.tensor), a.fsdp, a.tensor], "steps": a.steps,
        "max_loss_diff": dl, "max_param_diff": dp, "losses_1": one[0], "losses_n": many[0]})


if __name__ == "__main__":
  main()
