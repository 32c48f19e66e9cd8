"""Helpers for the scale-out tests: subprocess environments and multi-device tasks.

JAX fixes its device count when it starts, and the pytest process has already
started it with one CPU device, so every test that needs 8 (fake) CPU devices runs
this file as a script in a subprocess::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/_multidevice.py meshes OUT

(see ``env()``), which writes its results as JSON (+ .npz arrays) to OUT for the test to
assert on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The test config: the `tiny` preset with n_heads=8 (tiny has 2) so that a tensor axis of
# 8 really shards the attention heads (rotary_pct=0.5 keeps an even number of rotary dims
# of head_dim=4), 3 steps, checkpoints at 0 and 3 only.
TEST_OVERRIDES = {
    "model": {"n_heads": 8, "rotary_pct": 0.5},
    "train": {"steps": 3, "log_every": 1, "eval_every": 3, "eval_batches": 1,
              "ckpt_log_spaced": False, "ckpt_every": 3},
}
MESHES = [(2, 2, 2), (1, 1, 8)]  # restores: also on (8, 1, 1) and (1, 4, 2)


def env(n_devices: int = 8, cache_dir: str | os.PathLike | None = None) -> dict:
  """Environment for a JAX subprocess with ``n_devices`` fake CPU devices."""
  e = dict(os.environ)
  e.update({
      "JAX_PLATFORMS": "cpu",
      "XLA_FLAGS": " ".join([*(f for f in e.get("XLA_FLAGS", "").split()
                                if "xla_force_host_platform_device_count" not in f),
                             f"--xla_force_host_platform_device_count={n_devices}"]),
      "TF_CPP_MIN_LOG_LEVEL": "3",
      "PYTHONPATH": str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
  })
  if cache_dir is not None:
    e.update({"JAX_COMPILATION_CACHE_DIR": str(cache_dir),
              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
  return e


def run_task(task: str, out: Path, *args, n_devices: int = 8, cache_dir=None,
             timeout: float = 240) -> dict:
  """Run a task of this script in a subprocess; return its JSON result."""
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  proc = subprocess.run([sys.executable, str(Path(__file__)), task, str(out), *map(str, args)],
                        env=env(n_devices, cache_dir), cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout)
  if proc.returncode != 0:
    raise AssertionError(f"task {task} failed (rc={proc.returncode}):\n{proc.stderr[-6000:]}")
  return json.loads((out / "result.json").read_text())


def cache_dir(tmp_path_factory) -> Path:
  """A persistent XLA compilation cache shared by this test session's subprocesses."""
  p = Path(tmp_path_factory.getbasetemp()) / "jax_compile_cache"
  p.mkdir(exist_ok=True)
  return p


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_config():
  """The Config of the scale-out tests: tiny + TEST_OVERRIDES."""
  from sbjax import configs  # noqa: PLC0415
  from sbjax.config import Config  # noqa: PLC0415

  d = configs.get("tiny").to_dict()
  for k, v in TEST_OVERRIDES.items():
    d[k].update(v)
  return Config.from_dict(d)


def tree_to_np(tree) -> dict:
  """Flat {path: np.ndarray} of a pytree (for comparisons and .npz files)."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  return {jax.tree_util.keystr(k): np.asarray(v) for k, v in
          jax.tree_util.tree_leaves_with_path(tree)}


def max_abs_diff(a: dict, b: dict) -> float:
  import numpy as np  # noqa: PLC0415

  assert a.keys() == b.keys(), (sorted(a)[:5], sorted(b)[:5])
  return float(max(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))
                   for k in a))


# ----------------------------------------------------------------------------- tasks


def _steps_on_mesh(cfg, mesh, params0, dataset, n_steps):
  """``train.make_train_step`` jitted as sbjax.train shards it (parameters and optimizer state
  by ``sharding.tree_shardings``, the batch by ``batch_sharding``, the step and metrics
  replicated, parameters and state donated), run n_steps from params0 on ``mesh``. Returns
  (losses, params)."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from sbjax import sharding as shd  # noqa: PLC0415
  from sbjax import train as train_lib  # noqa: PLC0415
  from sbjax.model import Model  # noqa: PLC0415
  from sbjax.optim import make_optimizer  # noqa: PLC0415

  tc, model = cfg.train, Model(cfg.model)
  shd.check_divisible(cfg.model, mesh, tc.batch_size, tc.grad_accum)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, cfg.model, abstract)
  param_sh = shd.tree_shardings(abstract, mesh)
  opt_sh = shd.tree_shardings(jax.eval_shape(tx.init, abstract), mesh)
  repl, losses = shd.replicated(mesh), []
  step = jax.jit(train_lib.make_train_step(model, tx, tc.grad_accum, False),
                 in_shardings=(param_sh, opt_sh, shd.batch_sharding(mesh), repl),
                 out_shardings=(param_sh, opt_sh, repl), donate_argnums=(0, 1))
  with jax.set_mesh(mesh):
    params = jax.device_put(params0, param_sh)
    opt = jax.jit(tx.init, out_shardings=opt_sh)(params)
    for i in range(n_steps):
      params, opt, m = step(params, opt, shd.global_batch(dataset.train_batch(i), mesh),
                            np.int32(i))
      losses.append(float(m["loss"]))
  return losses, params


def task_meshes(out: Path):
  """Same 3 steps on 1 device and on each of MESHES; a full train() on (2,2,2) with
  checkpoints restored on (8,1,1), (1,4,2) and one device; the parameter specs."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from sbjax import checkpoint as ckpt  # noqa: PLC0415
  from sbjax import sharding as shd  # noqa: PLC0415
  from sbjax import train as train_lib  # noqa: PLC0415
  from sbjax.config import MeshConfig  # noqa: PLC0415
  from sbjax.data import make_dataset  # noqa: PLC0415
  from sbjax.model import Model, param_shardings  # noqa: PLC0415

  assert jax.device_count() == 8, jax.devices()
  cfg = test_config()
  tc = cfg.train
  ds = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=None)
  cfg = train_lib.resolve_vocab(cfg, ds.vocab_size)
  model = Model(cfg.model)
  one = shd.make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
  with jax.set_mesh(one):
    params0 = jax.jit(lambda k: model.init(k, 1, tc.seq_len))(jax.random.key(tc.seed))
  params0 = jax.tree.map(np.asarray, params0)
  res = {"meshes": {}}
  ref_losses, ref_params = _steps_on_mesh(cfg, one, params0, ds, tc.steps)
  ref = tree_to_np(ref_params)
  res["ref_losses"] = ref_losses
  names = {"embed": "['embed']", "q_kernel": "['block_0']['attn']['q_kernel']",
           "fc_in": "['block_0']['mlp']['fc_in_kernel']",
           "fc_out": "['block_0']['mlp']['fc_out_kernel']", "head": "['head']['w']",
           "ln_scale": "['ln_f']['scale']"}
  trained_222 = None
  for shape in MESHES:
    mesh = shd.make_mesh(MeshConfig(*shape))
    losses, params = _steps_on_mesh(cfg, mesh, params0, ds, tc.steps)
    flat = dict(jax.tree_util.tree_leaves_with_path(params))
    flat = {jax.tree_util.keystr(k): v for k, v in flat.items()}
    specs = {n: [list(a) if isinstance(a, tuple) else a for a in flat[p].sharding.spec]
             for n, p in names.items()}
    shard_shapes = {n: list(flat[p].addressable_shards[0].data.shape) for n, p in names.items()}
    np_params = tree_to_np(params)
    if shape == (2, 2, 2):
      trained_222 = np_params
    res["meshes"][str(shape)] = {
        "losses": losses, "max_loss_diff": float(np.max(np.abs(np.subtract(losses, ref_losses)))),
        "max_param_diff": max_abs_diff(np_params, ref), "specs": specs,
        "shard_shapes": shard_shapes}

  # The real training loop on (2,2,2), then its step-3 checkpoint restored elsewhere.
  wd = out / "run_222"
  mesh222 = shd.make_mesh(MeshConfig(2, 2, 2))
  cfg222 = cfg.replace(mesh=MeshConfig(2, 2, 2))
  train_lib.train(cfg222, wd, dataset=ds, mesh=mesh222, quiet=True)
  res["train_losses_222"] = [r["loss"] for r in train_lib.read_metrics(wd) if "loss" in r]
  m811 = shd.make_mesh(MeshConfig(8, 1, 1))
  _, p811, _ = ckpt.load_params(wd, 3, shardings=param_shardings(cfg.model, m811))
  _, p1, _ = ckpt.load_params(wd, 3)  # one device
  res["restored_811_spec_embed"] = list(p811["embed"].sharding.spec)
  res["restored_811_ndev"] = len(p811["embed"].sharding.device_set)
  res["restored_1_ndev"] = len(p1["embed"].sharding.device_set)
  np811, np1 = tree_to_np(p811), tree_to_np(p1)
  res["restore_811_vs_1"] = max_abs_diff(np811, np1)
  res["restore_vs_steps_222"] = max_abs_diff(np1, trained_222)
  # optimizer state too: resume step 3 of the (2,2,2) run's opt state on (1,4,2)
  abstract = model.abstract_params(tc.seq_len)
  from sbjax.optim import make_optimizer  # noqa: PLC0415

  tx = make_optimizer(tc, cfg.model, abstract)
  abstract_opt = jax.eval_shape(tx.init, abstract)
  m142 = shd.make_mesh(MeshConfig(1, 4, 2))
  _, p142, o142, meta = ckpt.restore_latest_good(
      wd, ckpt.abstract_with_shardings(abstract, shd.tree_shardings(abstract, m142)),
      ckpt.abstract_with_shardings(abstract_opt, shd.tree_shardings(abstract_opt, m142)))
  res["restore_142_vs_1"] = max_abs_diff(tree_to_np(p142), np1)
  res["restore_142_opt_spec_q"] = list(o142[1][0].mu["block_0"]["attn"]["q_kernel"].sharding.spec)
  res["meta_step"] = meta["step"]
  np.savez(out / "params_step3.npz", **np1)
  (out / "result.json").write_text(json.dumps(res, indent=1))


TASKS = {"meshes": task_meshes}


if __name__ == "__main__":
  sys.path.insert(0, str(ROOT))
  import logging  # noqa: PLC0415

  from absl import logging as absl_logging  # noqa: PLC0415

  absl_logging.set_verbosity(absl_logging.ERROR)
  logging.basicConfig(level=logging.WARNING)
  TASKS[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
