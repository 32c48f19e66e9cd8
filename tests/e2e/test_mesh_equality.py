"""The same training on 8 fake CPU devices as on one, and across 2 ``jax.distributed``
processes: equal losses and parameters, really sharded parameters, checkpoints that restore
on any mesh. JAX fixes its device count when it starts, so the 8-device run is a subprocess
(tests/_multidevice.py); the 2-process run is two ``experiments.train`` processes with 4
devices each (gloo CPU collectives). (The sharding rules themselves: tests/unit/
test_sharding.py.)"""

import json
import subprocess
import sys

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import train as train_lib
from sbjax.config import MeshConfig
from sbjax.data import make_dataset
from tests import _multidevice as md

TOL = 1e-5


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
  out = tmp_path_factory.mktemp("meshes")
  return out, md.run_task("meshes", out, cache_dir=md.cache_dir(tmp_path_factory), timeout=300)


def test_every_mesh_equals_one_device_and_really_shards(meshes):
  out, res = meshes
  assert set(res["meshes"]) == {str(m) for m in md.MESHES}
  for name, r in res["meshes"].items():
    assert r["max_loss_diff"] < TOL and r["max_param_diff"] < TOL, name
  np.testing.assert_allclose(res["train_losses_222"], res["ref_losses"], atol=TOL, rtol=0)
  specs = res["meshes"]["(2, 2, 2)"]["specs"]
  assert specs["embed"] == specs["head"] == specs["fc_out"] == ["tensor", "fsdp"]
  assert specs["q_kernel"] == ["fsdp", "tensor", None] and specs["ln_scale"] == [None]
  shapes = {m: r["shard_shapes"] for m, r in res["meshes"].items()}  # V=64 D=32 H=8 Dh=4 F=128
  assert shapes["(2, 2, 2)"]["embed"] == [32, 16] and shapes["(2, 2, 2)"]["fc_in"] == [16, 64]
  assert shapes["(1, 1, 8)"]["q_kernel"] == [32, 1, 4] and shapes["(1, 1, 8)"]["head"] == [8, 32]
  # a checkpoint saved by train() on (2, 2, 2) restores on (8, 1, 1), on (1, 4, 2) with its
  # optimizer state, and on one device (also in this process)
  assert res["meta_step"] == 3 and res["restored_1_ndev"] == 1
  assert res["restored_811_ndev"] == 8 and res["restored_811_spec_embed"] == ["tensor", "fsdp"]
  assert res["restore_811_vs_1"] == res["restore_142_vs_1"] == 0.0
  assert res["restore_vs_steps_222"] < TOL
  assert res["restore_142_opt_spec_q"] == ["fsdp", "tensor", None]
  cfg, params, step = ckpt.load_params(out / "run_222", 3)
  assert step == 3 and cfg.mesh == MeshConfig(2, 2, 2)
  saved, mine = np.load(out / "params_step3.npz"), md.tree_to_np(params)
  assert set(mine) == set(saved.files)
  for k in mine:
    np.testing.assert_array_equal(mine[k], saved[k])


def test_two_processes_equal_one(meshes, tmp_path, tmp_path_factory):
  """experiments.train on 2 processes of 4 devices, mesh (2, 2, 2), equals the 8-device
  run of the same config in one process (the ``meshes`` task's train() on (2, 2, 2))."""
  out, res = meshes
  cfg = md.test_config()  # the planted data written once: the processes only read it
  data = cfg.data.replace_options(data_dir=str(tmp_path / "tfds"))
  make_dataset(data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size, seed=0)
  flags = ["--config=tiny", f"--config.data.options.data_dir={tmp_path / 'tfds'}",
           *[f"--config.{s}.{k}={v}" for s, kv in md.TEST_OVERRIDES.items() for k, v in kv.items()],
           *[f"--config.mesh.{a}=2" for a in ("data", "fsdp", "tensor")]]
  port, cache = md.free_port(), md.cache_dir(tmp_path_factory)
  procs = [subprocess.Popen(
      [sys.executable, "-m", "experiments.train", *flags, f"--workdir={tmp_path / 'two'}",
       f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      env=md.env(4, cache), cwd=md.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True) for i in range(2)]
  try:
    outs = [p.communicate(timeout=240) for p in procs]  # a hang fails instead of blocking
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.communicate()
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-4000:]
  assert [json.loads(o.splitlines()[-1])["step"] for o, _ in outs] == [3, 3]
  recs = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in recs if "loss" in r] == [0, 1, 2]  # process 0 writes, once
  two = [r["loss"] for r in train_lib.read_metrics(tmp_path / "two") if "loss" in r]
  np.testing.assert_allclose(two, res["train_losses_222"], atol=TOL, rtol=0)
  parts = sorted(p.name for p in (tmp_path / "two" / "checkpoints" / "3" / "params").iterdir()
                 if p.name.startswith("ocdbt.process_"))
  assert parts == ["ocdbt.process_0", "ocdbt.process_1"]  # saved collectively
  saved = np.load(out / "params_step3.npz")
  got = md.tree_to_np(ckpt.load_params(tmp_path / "two", 3)[1])
  assert md.max_abs_diff(got, {k: saved[k] for k in saved.files}) < TOL
