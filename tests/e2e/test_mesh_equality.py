"""An 8-device mesh over 2 ``jax.distributed`` processes trains and saves as one device does."""

import json
import subprocess
import sys

import jax
import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.config import MeshConfig
from sbjax.train import read_metrics, train
from tests import _multidevice as md

TOL = 1e-5


def _losses(wd):
  return [r["loss"] for r in read_metrics(wd) if "loss" in r]


def test_two_processes_on_8_devices_equal_one_device(tmp_path):
  cfg = md.test_config()
  data = cfg.data.replace_options(data_dir=str(tmp_path / "tfds"))
  train(cfg.replace(data=data), tmp_path / "one", quiet=True)  # writes the data they read
  flags = ["--config=tiny", f"--config.data.options.data_dir={tmp_path / 'tfds'}",
           *[f"--config.{s}.{k}={v}" for s, kv in md.TEST_OVERRIDES.items() for k, v in kv.items()],
           *[f"--config.mesh.{a}=2" for a in ("data", "fsdp", "tensor")]]
  port = md.free_port()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "experiments.train", *flags, f"--workdir={tmp_path / 'two'}",
       f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      env=md.env(4), cwd=md.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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
  lines = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(x)["step"] for x in lines if '"loss"' in x] == [0, 1, 2]  # process 0, once
  np.testing.assert_allclose(_losses(tmp_path / "two"), _losses(tmp_path / "one"), atol=TOL,
                             rtol=0)
  parts = sorted(p.name for p in (tmp_path / "two" / "checkpoints" / "3" / "params").iterdir()
                 if p.name.startswith("ocdbt.process_"))
  assert parts == ["ocdbt.process_0", "ocdbt.process_1"]  # saved collectively
  cfg_two, two, step = ckpt.load_params(tmp_path / "two", 3)  # onto this one device
  assert step == 3 and cfg_two.mesh == MeshConfig(2, 2, 2)
  for a, b in zip(jax.tree.leaves(two), jax.tree.leaves(ckpt.load_params(tmp_path / "one", 3)[1]),
                  strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=0)
