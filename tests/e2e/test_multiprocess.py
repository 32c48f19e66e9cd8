"""A real 2-process run on localhost (jax.distributed, gloo CPU collectives, 4 fake devices
each) through the experiments.train entry point equals a 1-process 8-device run."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import train as train_lib
from tests import _multidevice as md

TOL = 1e-5
TIMEOUT = 240  # a hang (e.g. a collective one process never joins) fails instead of blocking


def _flags(tfds_dir, mesh):
  cfg = md.TEST_OVERRIDES
  out = ["--config=tiny"]
  for section, vals in cfg.items():
    out += [f"--config.{section}.{k}={v}" for k, v in vals.items()]
  out += [f"--config.data.options.data_dir={tfds_dir}"]
  out += [f"--config.mesh.{a}={n}" for a, n in zip(("data", "fsdp", "tensor"), mesh)]
  return out


def _summary(stdout: str) -> dict:
  lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
  return json.loads(lines[-1])


@pytest.mark.parametrize("mesh", [(2, 2, 2)])
def test_two_processes_equal_one_process(tmp_path, tmp_path_factory, mesh):
  from sbjax.data import make_dataset

  # Prepare the planted data once, so the processes only read it (no concurrent TFDS writes).
  tfds_dir = tmp_path / "tfds"
  cfg = md.test_config()
  make_dataset(cfg.data.replace_options(data_dir=str(tfds_dir)),
               seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size, seed=0)
  cache = md.cache_dir(tmp_path_factory)
  base = [sys.executable, "-m", "experiments.train", *_flags(tfds_dir, mesh)]
  port = md.free_port()
  procs = {
      "ref": subprocess.Popen(base + [f"--workdir={tmp_path / 'one'}"], env=md.env(8, cache),
                              cwd=md.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)}
  for i in range(2):
    procs[i] = subprocess.Popen(
        base + [f"--workdir={tmp_path / 'two'}", f"--coordinator_address=localhost:{port}",
                "--num_processes=2", f"--process_id={i}"],
        env=md.env(4, cache), cwd=md.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
  outs = {}
  try:
    for k, p in procs.items():
      outs[k] = p.communicate(timeout=TIMEOUT)
  finally:
    for p in procs.values():
      if p.poll() is None:
        p.kill()
        p.communicate()
  for k, p in procs.items():
    assert p.returncode == 0, f"process {k} failed:\n{outs[k][1][-4000:]}"
  s0, s1, ref = _summary(outs[0][0]), _summary(outs[1][0]), _summary(outs["ref"][0])
  assert s0["step"] == s1["step"] == ref["step"] == 3
  # metrics are written by process 0 only: one record per step, no duplicates
  lines = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
  recs = [json.loads(x) for x in lines]
  assert [r["step"] for r in recs if "loss" in r] == [0, 1, 2]
  assert [r["step"] for r in recs if "eval_loss" in r] == [0, 3]
  two = [r["loss"] for r in train_lib.read_metrics(tmp_path / "two") if "loss" in r]
  one = [r["loss"] for r in train_lib.read_metrics(tmp_path / "one") if "loss" in r]
  np.testing.assert_allclose(two, one, atol=TOL, rtol=0)
  assert abs(s0["eval_loss"] - ref["eval_loss"]) < TOL
  # the checkpoint was written collectively (one ocdbt part per process) and restores here
  parts = sorted(p.name for p in (tmp_path / "two" / "checkpoints" / "3" / "params").iterdir()
                 if p.name.startswith("ocdbt.process_"))
  assert parts == ["ocdbt.process_0", "ocdbt.process_1"]
  _, p_two, _ = ckpt.load_params(tmp_path / "two", 3)
  _, p_one, _ = ckpt.load_params(tmp_path / "one", 3)
  assert md.max_abs_diff(md.tree_to_np(p_two), md.tree_to_np(p_one)) < TOL


def test_distributed_flags_are_checked(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.train", "--config=tiny", f"--workdir={tmp_path}",
       "--coordinator_address=localhost:1", "--num_processes=2"],
      env=md.env(1), cwd=md.ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert "--coordinator_address needs --num_processes and --process_id" in proc.stderr
