"""Population mode: N members (seeds, optionally learning rates) in one vmapped jit step
equal N separate runs; each member is a normal workdir (load_params, metrics.jsonl).

Tolerance: 1e-5 absolute on losses, eval losses and parameters after 3 steps (members
with the base lr are unscaled; the lr member differs from its separate run by update
rounding only, see sbjax/train/population.py)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.train import members
from sbjax import train as train_lib
from tests import _multidevice as md

TOL = 1e-5
SEEDS = [0, 1, 2]
LRS = [3e-3, 3e-3, 1e-3]  # tiny's lr is 3e-3; member 2 runs at a third of it
EXTRA = {"train.ckpt_log_spaced": "true"}  # checkpoints at 0, 1, 2, 3


def _cli(workdir, *flags):
  args = ["--config=tiny"]
  for section, vals in md.TEST_OVERRIDES.items():
    args += [f"--config.{section}.{k}={v}" for k, v in vals.items()]
  args += [f"--config.{k}={v}" for k, v in EXTRA.items()]
  return [sys.executable, "-m", "experiments.train", *args, f"--workdir={workdir}", *flags]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("population")
  cache = md.cache_dir(tmp_path_factory)
  # the population through the CLI (interrupted after step 2, then resumed) in subprocesses;
  # the separate runs, the reference (no process boundary to test), in this process while
  # the first CLI run goes (one interpreter and JAX start-up fewer)
  pop_flags = ["--population=3", "--population_lrs=" + ",".join(map(str, LRS))]
  first = subprocess.Popen(_cli(root / "pop", *pop_flags, "--stop_after=2"), env=md.env(1, cache),
                           cwd=md.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    md.task_separate(root, ",".join(map(str, SEEDS)), ",".join(map(str, LRS)),
                     *[f"{k}={v}" for k, v in EXTRA.items()])
    _, err = first.communicate(timeout=240)
  finally:
    if first.poll() is None:
      first.kill()
      first.communicate()
  assert first.returncode == 0, err[-4000:]
  second = subprocess.run(_cli(root / "pop", *pop_flags), env=md.env(1, cache), cwd=md.ROOT,
                          capture_output=True, text=True, timeout=240)
  assert second.returncode == 0, second.stderr[-4000:]
  summaries = [json.loads(x) for x in second.stdout.splitlines() if x.startswith("{")]
  return root, summaries


def test_population_equals_separate_runs(runs):
  root, summaries = runs
  assert [s["seed"] for s in summaries] == SEEDS and [s["lr"] for s in summaries] == LRS
  assert all(s["start_step"] == 2 and s["step"] == 3 for s in summaries)  # resumed at 2
  for i in range(3):
    mem, sep = root / "pop" / f"member_{i}", root / f"sep_{i}"
    a, b = train_lib.read_metrics(mem), train_lib.read_metrics(sep)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    for ra, rb in zip(a, b):
      for key in ("loss", "eval_loss", "eval_acc", "lr"):
        assert (key in ra) == (key in rb)
        if key in ra:
          assert abs(ra[key] - rb[key]) < TOL, (i, ra, rb)
    # each member is a normal workdir: same config.json as its separate run, load_params works
    assert json.loads((mem / "config.json").read_text()) == json.loads(
        (sep / "config.json").read_text())
    assert ckpt.list_steps(mem) == ckpt.list_steps(sep) == [0, 1, 2, 3]
    _, pa, step = ckpt.load_params(mem)
    _, pb, _ = ckpt.load_params(sep)
    assert step == 3
    assert md.max_abs_diff(md.tree_to_np(pa), md.tree_to_np(pb)) < TOL
  # the members really differ
  l0 = [r["loss"] for r in train_lib.read_metrics(root / "pop" / "member_0") if "loss" in r]
  l1 = [r["loss"] for r in train_lib.read_metrics(root / "pop" / "member_1") if "loss" in r]
  assert not np.allclose(l0, l1)
  pop = json.loads((root / "pop" / "population.json").read_text())
  assert [m["dir"] for m in pop["members"]] == ["member_0", "member_1", "member_2"]


def test_member_configs_and_errors():
  cfg = md.test_config()
  ms = members.member_configs(cfg, n=3)
  assert [m.train.seed for m in ms] == [0, 1, 2] and all(m.train.lr == cfg.train.lr for m in ms)
  ms = members.member_configs(cfg, lrs=[1e-3, 2e-3])
  assert [m.train.seed for m in ms] == [0, 1] and [m.train.lr for m in ms] == [1e-3, 2e-3]
  with pytest.raises(ValueError, match="population size is ambiguous"):
    members.member_configs(cfg, n=3, lrs=[1e-3, 2e-3])
  with pytest.raises(ValueError, match=r"train.lr=-1.0"):
    members.member_configs(cfg, lrs=[1e-3, -1.0])
