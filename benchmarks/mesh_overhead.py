r"""Overhead of an 8-device CPU mesh vs one device, and a v5e-8 estimate from FLOPs.

  python benchmarks/mesh_overhead.py                    # preset "planted", 20 timed steps
  python benchmarks/mesh_overhead.py --preset=tiny --steps=50

Runs the sbjax training step (``train.make_train_step`` jitted with in/out shardings
and donation under ``jax.set_mesh``, as ``sbjax.train`` does: ``_mesh_step.py``) on a
1-device mesh and on 8-device meshes (data, fsdp, tensor) in ONE process with 8 fake CPU devices
(XLA_FLAGS is set before JAX starts unless already given), and prints steps/s and
the ratio to one device. The fake devices share the same physical cores, so the
ratio measures the partitioning + collective overhead, not a speed-up.

It then prints the expected step time of ``pythia-70m`` / ``pythia-160m`` on a TPU
v5e-8 (8 chips × 197 TFLOP/s bf16, 16 GB HBM each) from ``model.flops_per_token``
at 40% MFU, and the measured CPU FLOP/s of the 1-device step for comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks._mesh_step import mesh_train_step  # noqa: E402
from sbjax import configs  # noqa: E402
from sbjax import sharding as shd  # noqa: E402
from sbjax import train as train_lib  # noqa: E402
from sbjax.config import MeshConfig  # noqa: E402
from sbjax.model import Model, flops_per_token  # noqa: E402

V5E_PEAK = 197e12  # bf16 FLOP/s per chip
V5E_HBM = 16e9  # bytes per chip


def time_mesh(cfg, mesh, params0, batches, steps: int) -> float:
  step, params, opt = mesh_train_step(cfg, mesh, params0)
  with jax.set_mesh(mesh):
    dev_batches = [shd.global_batch(b, mesh) for b in batches]
    for i in range(3):  # compile + warm up
      params, opt, m = step(params, opt, dev_batches[i % len(dev_batches)], np.int32(i))
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for i in range(steps):
      params, opt, m = step(params, opt, dev_batches[i % len(dev_batches)], np.int32(i))
    jax.block_until_ready((params, m))
    return steps / (time.perf_counter() - t0)


def v5e_estimate(name: str, mfu: float = 0.4) -> dict:
  cfg = configs.load(name)
  mc, tc = cfg.model, cfg.train
  fpt = flops_per_token(mc, tc.seq_len)
  tokens = tc.batch_size * tc.seq_len
  step_s = fpt * tokens / (8 * V5E_PEAK * mfu)
  n = Model(mc).param_count(Model(mc).abstract_params(8))
  # fp32 params + grads + Adam mu, nu = 16 bytes/param, fully sharded over 8 chips (fsdp=8)
  state_gb_per_chip = 16 * n / 8 / 1e9
  return {"name": name, "params_M": n / 1e6, "flops_per_token_G": fpt / 1e9,
          "tokens_per_step": tokens, "step_s": step_s, "tokens_per_s": tokens / step_s,
          "run_h": step_s * tc.steps / 3600, "state_gb_per_chip_fsdp8": state_gb_per_chip,
          "state_gb_replicated": 16 * n / 1e9}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", default="planted")
  ap.add_argument("--steps", type=int, default=20)
  ap.add_argument("--meshes", default="8,1,1;2,2,2;1,1,8")
  args = ap.parse_args()
  cfg = configs.load(args.preset)
  if cfg.model.vocab_size == 0:
    cfg = train_lib.resolve_vocab(cfg, cfg.data.options.vocab)
  tc, mc = cfg.train, cfg.model
  rng = np.random.default_rng(0)
  batches = [rng.integers(0, mc.vocab_size, (tc.batch_size, tc.seq_len + 1), dtype=np.int32)
             for _ in range(4)]
  model = Model(mc)
  params0 = jax.tree.map(np.asarray, jax.jit(lambda k: model.init(k, 1, tc.seq_len))(
      jax.random.key(0)))
  one = shd.make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
  base = time_mesh(cfg, one, params0, batches, args.steps)
  fpt = flops_per_token(mc, tc.seq_len)
  print(f"preset {args.preset}: d={mc.d_model} L={mc.n_layers} V={mc.vocab_size} "
        f"batch {tc.batch_size}x{tc.seq_len}; {jax.device_count()} CPU devices, "
        f"{os.cpu_count()} cores")
  print(f"1 device        : {base:8.2f} steps/s  ({base * tc.batch_size * tc.seq_len * fpt / 1e9:.2f}"
        " GFLOP/s by flops_per_token)")
  for spec in args.meshes.split(";"):
    shape = tuple(int(x) for x in spec.split(","))
    mesh = shd.make_mesh(MeshConfig(*shape))
    sps = time_mesh(cfg, mesh, params0, batches, args.steps)
    print(f"mesh {shape}: {sps:8.2f} steps/s  ratio to 1 device {sps / base:.3f} "
          f"(overhead x{base / sps:.2f})")
  print("\nTPU v5e-8 estimate (8 x 197 TFLOP/s bf16, 40% MFU; Pythia batch 1024 x 2048):")
  for name in ("pythia-70m", "pythia-160m"):
    e = v5e_estimate(name)
    print(f"  {name}: {e['params_M']:.1f}M params, {e['flops_per_token_G']:.2f} GFLOP/token, "
          f"{e['step_s']:.2f} s/step, {e['tokens_per_s'] / 1e6:.2f} M tok/s, "
          f"{e['run_h']:.0f} h for 143k steps; train state {e['state_gb_replicated']:.1f} GB "
          f"replicated / {e['state_gb_per_chip_fsdp8']:.2f} GB per chip with fsdp=8")


if __name__ == "__main__":
  main()
