"""Sweeps: grid expansion and names; the command line skips finished runs and resumes the rest."""

import json
import subprocess
import sys

import pytest

from sbjax import sweep
from sbjax import train as train_lib
from tests import _multidevice as md

GRID = {
    "name": "test",
    "base": "tiny",
    "overrides": {"train.steps": 6, "train.log_every": 1, "train.eval_every": 6,
                  "train.eval_batches": 1, "train": {"ckpt_log_spaced": False, "ckpt_every": 3}},
    "grid": {"train.lr": [0.003, 0.001], "train.seed": [0, 1]},
}
NAMES = ["lr=0.003,seed=0", "lr=0.003,seed=1", "lr=0.001,seed=0", "lr=0.001,seed=1"]


def test_expand_names_and_configs():
  runs = sweep.expand(GRID)
  assert [r.name for r in runs] == NAMES
  c = runs[3].config
  assert (c.train.lr, c.train.seed, c.train.steps, c.train.ckpt_every) == (0.001, 1, 6, 3)
  assert c.name == NAMES[3]
  g = {"base": "tiny", "grid": {"data.options.rank": [2]},  # an ambiguous last component
       "runs": [{"model.head": "lowrank", "model.head.rank": 4}, {"model.head": "dense"}]}
  runs = sweep.expand(g)
  assert [r.name for r in runs] == ["data.options.rank=2,head=lowrank,model.head.rank=4",
                                    "data.options.rank=2,head=dense"]
  assert runs[0].config.model.head.rank == 4 and runs[0].config.data.options.rank == 2
  assert sweep.run_name({"data.options.path": "a b/c"}) == "path=a_b_c"
  assert len(sweep.run_name({"data.options.path": "x" * 200})) == 109
  with pytest.raises(ValueError, match=r"run 'lr=bad': .*train.lr"):
    sweep.expand({"base": "tiny", "grid": {"train.lr": ["bad"]}})


def _sweep(grid_file, out, *flags):
  return subprocess.run(
      [sys.executable, "-m", "experiments.sweep", f"--grid={grid_file}", f"--sweep_dir={out}",
       *flags], env=md.env(1), cwd=md.ROOT, capture_output=True, text=True, timeout=300)


def test_sweep_resumes_and_skips(tmp_path):
  grid_file = tmp_path / "grid.json"
  grid_file.write_text(json.dumps(GRID))
  out = tmp_path / "sweep"
  run1 = sweep.expand(GRID)[1]
  train_lib.train(run1.config, out / "runs" / NAMES[1], stop_after=3, quiet=True)
  dry = _sweep(grid_file, out, "--dry_run", "--num_hosts=2", "--host_index=1")
  assert dry.returncode == 0, dry.stderr[-3000:]
  listed = [ln.split() for ln in dry.stdout.splitlines() if "host" in ln]
  assert [(int(c[2]), c[3]) for c in listed] == [(0, "new"), (1, "partial"), (0, "new"),
                                                 (1, "new")]
  second = _sweep(grid_file, out)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "4 done" in second.stdout and "resuming" in second.stderr
  rows = {r["name"]: r for r in json.loads((out / "index.json").read_text())["runs"]}
  assert all(rows[n]["status"] == "done" and rows[n]["step"] == 6 for n in NAMES)
  assert rows[NAMES[2]]["train.lr"] == 0.001 and rows[NAMES[2]]["train.seed"] == 0
  steps = [r["step"] for r in train_lib.read_metrics(out / "runs" / NAMES[1]) if "loss" in r]
  assert steps == list(range(6))  # the resumed run continues the interrupted one
  stamp = (out / "runs" / NAMES[0] / "DONE").stat().st_mtime_ns
  third = sweep.run_sweep(grid_file, out, num_hosts=2, host_index=1)
  assert [r["status"] for r in third] == ["done"] * 4
  assert (out / "runs_host1.csv").exists() and not (out / "runs_host0.csv").exists()
  assert (out / "runs" / NAMES[0] / "DONE").stat().st_mtime_ns == stamp
