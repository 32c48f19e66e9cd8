"""Sweeps: grid expansion and names, a 4-run sweep killed (SIGKILL) during its second run,
then rerun: finished runs skipped, the interrupted one resumed, the index complete; a third
pass as host 1 of 2 skips its runs."""

import csv
import json
import signal
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
  assert [r.overrides for r in runs][1] == {"train.lr": 0.003, "train.seed": 1}
  c = runs[3].config
  assert (c.train.lr, c.train.seed, c.train.steps, c.train.ckpt_every) == (0.001, 1, 6, 3)
  assert c.name == NAMES[3] and c.model.d_model == 32  # the tiny base
  # explicit variants crossed with the grid; an ambiguous last component keeps its section
  g = {"base": "tiny", "grid": {"data.options.rank": [2]},
       "runs": [{"model.head": "lowrank", "model.head.rank": 4}, {"model.head": "dense"}]}
  runs = sweep.expand(g)
  assert [r.name for r in runs] == ["data.options.rank=2,head=lowrank,model.head.rank=4",
                                    "data.options.rank=2,head=dense"]
  assert runs[0].config.model.head.rank == 4 and runs[0].config.data.options.rank == 2
  # unsafe characters are replaced; long names get a hash; names are stable
  assert sweep.run_name({"data.options.path": "a b/c"}) == "path=a_b_c"
  long = sweep.run_name({"data.options.path": "x" * 200})
  assert len(long) == 109 and long == sweep.run_name({"data.options.path": "x" * 200})


def test_grid_errors():
  with pytest.raises(ValueError, match=r"^sweep grid: run 'head_rnk=2': invalid config key 'model.head_rnk'; did you mean"):
    sweep.expand({"base": "tiny", "grid": {"model.head_rnk": [2]}})
  with pytest.raises(ValueError, match=r"invalid config key 'lr'; did you mean 'train.lr'\?$"):
    sweep.expand({"base": "tiny", "grid": {"lr": [1e-3]}})
  with pytest.raises(ValueError, match=r"run 'head=bogus': invalid config: .*model.head"):
    sweep.expand({"base": "tiny", "grid": {"model.head": ["bogus"]}})
  with pytest.raises(ValueError, match=r"grid\['train.seed'\] must be a non-empty list"):
    sweep.expand({"base": "tiny", "grid": {"train.seed": 3}})
  with pytest.raises(ValueError, match="unknown top-level keys"):
    sweep.expand({"base": "tiny", "gird": {}})


def _sweep(grid_file, out, cache, *flags):
  return subprocess.run(
      [sys.executable, "-m", "experiments.sweep", f"--grid={grid_file}", f"--sweep_dir={out}",
       *flags], env=md.env(1, cache), cwd=md.ROOT, capture_output=True, text=True, timeout=240)


def test_sweep_kill_and_resume(tmp_path, tmp_path_factory):
  cache = md.cache_dir(tmp_path_factory)
  grid_file = tmp_path / "grid.json"
  grid_file.write_text(json.dumps(GRID))
  out = tmp_path / "sweep"
  # first invocation: run 0 finishes, run 1 is killed (SIGKILL) after its step-3 checkpoint
  first = _sweep(grid_file, out, cache, "--kill_at=1:3")
  assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
  assert (out / NAMES[0] / "DONE").exists() and not (out / NAMES[1] / "DONE").exists()
  assert not (out / NAMES[2]).exists()
  # the listing, with the host flags of a two-host sweep parsed by the command line (the
  # skip-only third pass below runs in-process: only the CLI's flags need the process)
  dry = _sweep(grid_file, out, cache, "--dry_run", "--num_hosts=2", "--host_index=1")
  assert dry.returncode == 0, dry.stderr[-3000:]
  listed = [ln.split() for ln in dry.stdout.splitlines() if "host" in ln]
  states = {cells[-1]: cells[3] for cells in listed}
  assert states == {NAMES[0]: "done", NAMES[1]: "partial", NAMES[2]: "new", NAMES[3]: "new"}
  assert [int(cells[2]) for cells in listed] == [0, 1, 0, 1]  # run i on host i % 2
  # rerun: skips run 0, resumes run 1 from step 3, runs 2 and 3
  second = _sweep(grid_file, out, cache)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "4 done" in second.stdout
  idx = sweep.read_index(out)
  assert idx["swept_keys"] == ["train.lr", "train.seed"]
  rows = {r["name"]: r for r in idx["runs"]}
  assert [rows[n]["action"] for n in NAMES] == ["skipped", "resumed", "new", "new"]
  for n in NAMES:
    r = rows[n]
    assert r["status"] == "done" and r["steps"] == 6
    assert r["loss"] > 0 and r["eval_loss"] > 0 and 0 <= r["eval_acc"] <= 1
  assert rows[NAMES[2]]["train.lr"] == 0.001 and rows[NAMES[2]]["train.seed"] == 0
  log = [json.loads(x) for x in (out / "sweep_log.jsonl").read_text().splitlines()]
  resumed = [x for x in log if x["run"] == NAMES[1] and x["action"] == "resumed"]
  assert len(resumed) == 1 and resumed[0]["start_step"] == 3 and resumed[0]["end_step"] == 6
  # the resumed run's metrics continue the killed one's without gaps
  steps = [r["step"] for r in train_lib.read_metrics(out / NAMES[1]) if "loss" in r]
  assert steps == list(range(6))
  with open(out / "index.csv") as f:
    table = list(csv.DictReader(f))
  assert [t["name"] for t in table] == NAMES
  assert set(table[0]) >= {"name", "status", "action", "train.lr", "train.seed", "steps", "loss",
                           "eval_loss", "eval_acc"}
  # a third pass, host 1 of 2, does nothing but skip (in-process: it trains nothing, and the
  # host flags went through the command line in the dry run above)
  third = sweep.run_sweep(grid_file, out, num_hosts=2, host_index=1)
  assert [r["status"] for r in third] == ["done"] * 4
  new_log = [json.loads(x) for x in (out / "sweep_log.jsonl").read_text().splitlines()][len(log):]
  assert [(x["run"], x["action"], x["host"]) for x in new_log] == [
      (NAMES[1], "skipped", 1), (NAMES[3], "skipped", 1)]  # host 1 of 2: runs 1 and 3 only
  rows = {r["name"]: r for r in sweep.read_index(out)["runs"]}
  assert [rows[n]["host"] for n in NAMES] == [0, 1, 0, 1]
  assert all(rows[n]["status"] == "done" for n in NAMES)
