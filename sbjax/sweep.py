"""Sweeps: a grid over config keys, expanded to named runs, run, skipped or resumed.

Grid file (JSON)::

    {
      "name": "head-rank",                       # optional, recorded in the index
      "base": "tiny",                            # preset name, or a .json config path
                                                 # (relative to the grid file)
      "overrides": {"train.steps": 200,          # applied to every run; dotted keys
                    "model": {"head": "lowrank"}},  # or nested sections
      "grid": {"model.head.rank": [2, 4, 8],     # cartesian product over these keys
               "train.seed": [0, 1]},            # (file order, the last varies fastest)
      "runs": [{"train.lr": 1e-3},               # optional: explicit variants, crossed
               {"train.lr": 3e-3, "train.warmup_steps": 10}]  # with the grid
    }

Any ``section.key`` of ``sbjax.config.Config`` can be swept (``model.*``, ``data.*``,
``train.*``, ``mesh.*``). Every run's config is validated when the grid is expanded,
so a bad value fails before anything trains.

Run names are stable and readable: the swept keys' last components with their values,
e.g. ``rank=2,seed=0`` (a full dotted key where the last component is ambiguous,
e.g. ``model.vocab_size`` vs ``data.options.vocab_size``; characters outside
``[A-Za-z0-9._=,+-]`` become ``_``; names longer than 100 characters, or that would
collide, get a short hash of the run's overrides). A run's workdir is
``SWEEP_DIR/<name>`` and its ``config.name`` is the name.

Execution (``run_sweep``): runs go sequentially; with ``num_hosts > 1`` host ``h``
runs the runs with ``index % num_hosts == h`` (independent runs per host, no
``jax.distributed``). Under ``jax.distributed`` (a pod running each run over all its
chips) every process iterates all runs together and process 0 writes the files.
A run is finished when ``<workdir>/DONE`` exists (``sbjax.train.done``) or its newest
checkpoint is its ``train.steps``: it is *skipped*. A run with checkpoints short of that
is *resumed* (``sbjax.train.train`` continues from its newest checkpoint); otherwise it
is *new*. A run that raises is recorded as *failed* and the sweep goes on.

Outputs in SWEEP_DIR: ``index.json`` and ``index.csv`` (one row per run: name,
status, this invocation's action, the swept keys' values, steps, final loss,
eval_loss, eval_acc, n_params, workdir), rebuilt from the run directories after every
run (so they are consistent across hosts), and ``sweep_log.jsonl`` (one line per
action: time, host, run, action, start and end step).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import itertools
import json
import logging
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

import jax

from sbjax import checkpoint as ckpt
from sbjax import configs, overrides
from sbjax.atomic import atomic_write_text
from sbjax.config import Config
from sbjax.paths import upath
from sbjax.data import sources as data_sources
from sbjax.train import make_dataset_for, summary_from_metrics, train
from sbjax.train.done import DONE, finished, mark_finished
from sbjax.train.workdir import append_jsonl

log = logging.getLogger("sbjax")

GRID_KEYS = {"name", "base", "overrides", "grid", "runs"}
SWEEP_LOG = "sweep_log.jsonl"
INDEX_FIELDS = ["name", "status", "action", "host", "steps", "loss", "eval_loss", "eval_acc",
                "n_params", "workdir", "error"]


@dataclasses.dataclass
class Run:
  index: int
  name: str
  overrides: dict  # the swept keys' values (dotted key -> value)
  config: Config


# ----------------------------------------------------------------------------- grid


def _flatten(d: dict) -> dict:
  """Nested sections ({"model": {"head": ..}}) as dotted keys; other keys as they are."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and k in ("model", "data", "train", "mesh"):
      out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
    else:
      out[k] = v
  return out


def load_grid(path) -> dict:
  path = upath(path)
  if not path.exists():
    raise FileNotFoundError(f"sweep grid {path} does not exist")
  try:
    grid = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"sweep grid {path} is not valid JSON: {e}") from None
  if not isinstance(grid, dict):
    raise ValueError(f"sweep grid {path}: expected a JSON object with keys {sorted(GRID_KEYS)}")
  grid.setdefault("_dir", str(path.parent))
  return grid


def _base_config(grid: dict) -> Config:
  """The grid's base: a config dict (missing fields take their defaults), a config name, or a
  .json config (relative to the grid file)."""
  base = grid.get("base", "tiny")
  if isinstance(base, dict):
    return Config.from_dict(base)
  if str(base).endswith(".json") and not Path(base).is_absolute():
    cand = Path(grid.get("_dir", ".")) / base
    base = str(cand) if cand.exists() else base
  return configs.load(str(base))


def _fmt(v: Any) -> str:
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, float):
    return repr(v)
  if isinstance(v, (list, tuple)):
    return "-".join(_fmt(x) for x in v)
  return str(v)


def _short_keys(keys: list[str]) -> dict[str, str]:
  last = [k.split(".")[-1] for k in keys]
  return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def _hash(obj) -> str:
  return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def run_name(overrides: dict, short: dict[str, str] | None = None) -> str:
  """Readable, filesystem-safe, stable name of a run from its swept values."""
  if not overrides:
    return "run"
  short = short or _short_keys(list(overrides))
  name = ",".join(f"{short[k]}={_fmt(v)}" for k, v in overrides.items())
  name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)
  if len(name) > 100:
    name = name[:100] + "-" + _hash(overrides)
  return name


def expand(grid: dict) -> list[Run]:
  """The runs of a grid dict (see the module docstring), configs validated."""
  unknown = sorted(set(grid) - GRID_KEYS - {"_dir"})
  if unknown:
    raise ValueError(f"sweep grid: unknown top-level keys {unknown}; allowed: {sorted(GRID_KEYS)}")
  axes = grid.get("grid", {}) or {}
  if not isinstance(axes, dict):
    raise ValueError("sweep grid: 'grid' must map dotted keys to lists of values")
  for k, vals in axes.items():
    if not isinstance(vals, list) or not vals:
      raise ValueError(f"sweep grid: grid[{k!r}] must be a non-empty list of values, got {vals!r}")
  variants = grid.get("runs") or [{}]
  if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
    raise ValueError("sweep grid: 'runs' must be a list of objects of dotted keys -> values")
  variants = [_flatten(v) for v in variants]
  common = _flatten(grid.get("overrides", {}) or {})
  swept = list(axes)
  for v in variants:
    swept += [k for k in v if k not in swept]
  short = _short_keys(swept)
  base = _base_config(grid)
  runs: list[Run] = []
  for combo in itertools.product(*axes.values()) if axes else [()]:
    point = dict(zip(axes, combo))
    for var in variants:
      over = {k: v for k, v in {**point, **var}.items()}
      over = {k: over[k] for k in swept if k in over}
      name = run_name(over, {k: short[k] for k in over})
      try:
        cfg = overrides.apply(base, {**common, **over, "name": name})
      except ValueError as e:
        raise ValueError(f"sweep grid: run {name!r}: {e}") from None
      runs.append(Run(len(runs), name, over, cfg))
  names = [r.name for r in runs]
  dups = {n for n in names if names.count(n) > 1}
  for r in runs:
    if r.name in dups:
      r.name = f"{r.name}-{_hash(r.overrides)}"
      r.config = r.config.replace(name=r.name)
  if len({r.name for r in runs}) != len(runs):
    raise ValueError("sweep grid: runs with identical settings; remove the duplicates")
  return runs


def swept_keys(runs: list[Run]) -> list[str]:
  keys: list[str] = []
  for r in runs:
    keys += [k for k in r.overrides if k not in keys]
  return keys


# ----------------------------------------------------------------------------- state on disk


def _latest_step(workdir: Path) -> int | None:
  steps = ckpt.list_steps(workdir)
  return steps[-1] if steps else None


def run_state(workdir: Path, steps: int) -> str:
  """'done' | 'partial' | 'new' from the run directory."""
  if (workdir / DONE).exists():
    return "done"
  last = _latest_step(workdir)
  if last is not None and last >= steps:
    return "done"
  return "partial" if last is not None else "new"


def _log_actions(sweep_dir: Path) -> dict[str, dict]:
  out: dict[str, dict] = {}
  path = sweep_dir / SWEEP_LOG
  if path.exists():
    for line in path.read_text().splitlines():
      try:
        rec = json.loads(line)
      except ValueError:
        continue  # a line cut by a kill
      out[rec.get("run", "")] = rec
  return out


def index_rows(runs: list[Run], sweep_dir: Path, host_of: Callable[[Run], int]) -> list[dict]:
  last = _log_actions(sweep_dir)
  rows = []
  for r in runs:
    wd = sweep_dir / r.name
    steps = r.config.train.steps
    state = run_state(wd, steps)
    act = last.get(r.name, {})
    status = {"done": "done", "partial": "partial", "new": "pending"}[state]
    if act.get("action") == "failed" and state != "done":
      status = "failed"
    row = {"name": r.name, "status": status, "action": act.get("action", ""),
           "host": host_of(r), **{k: r.overrides.get(k) for k in r.overrides}}
    logged = summary_from_metrics(wd, {}) if wd.exists() else {}
    done = {**logged, **(finished(wd) or {})}
    row["steps"] = done.get("step", _latest_step(wd) if wd.exists() else None)
    row.update({k: done.get(k) for k in ("loss", "eval_loss", "eval_acc", "n_params")})
    row["workdir"] = r.name
    row["error"] = act.get("error", "") if status == "failed" else ""
    rows.append(row)
  return rows


def write_index(sweep_dir: Path, grid: dict, runs: list[Run], rows: list[dict]) -> None:
  keys = swept_keys(runs)
  payload = {"name": grid.get("name", ""), "swept_keys": keys,
             "grid": {k: v for k, v in grid.items() if not k.startswith("_")},
             "runs": [{**row, "overrides": r.overrides} for row, r in zip(rows, runs)]}
  atomic_write_text(sweep_dir / "index.json", json.dumps(payload, indent=1, default=str))
  fields = INDEX_FIELDS[:4] + keys + INDEX_FIELDS[4:]
  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
  w.writeheader()
  for row in rows:
    w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
  atomic_write_text(sweep_dir / "index.csv", buf.getvalue())


def read_index(sweep_dir) -> dict:
  return json.loads((upath(sweep_dir) / "index.json").read_text())


def _shared_dataset(cfg: Config, sweep_dir: Path, datasets: dict):
  """Data its source calls shareable (the planted languages) is prepared once per sweep and
  shared by its runs; None otherwise."""
  if not data_sources.get(cfg.data.source).shareable(cfg.data.options):
    return None
  key = (json.dumps(cfg.to_dict()["data"], sort_keys=True), cfg.train.seq_len,
         cfg.train.batch_size, cfg.train.data_seed)
  if key not in datasets:
    datasets[key] = make_dataset_for(cfg, sweep_dir / "_data")
  return datasets[key]


def _run_one(r: Run, sweep_dir: Path, ctx: dict, rec: dict, stop_after) -> dict | None:
  """Train one run; a failure is logged and recorded (None), the sweep goes on."""
  try:
    dataset = _shared_dataset(r.config, sweep_dir, ctx["datasets"])
    return ctx["train_fn"](r.config, sweep_dir / r.name, dataset=dataset, stop_after=stop_after,
                           quiet=ctx["quiet"])
  except Exception as e:  # noqa: BLE001 - record and go on with the other runs
    log.error("sweep: run %s failed: %s: %s", r.name, type(e).__name__, e)
    if jax.process_index() == 0:
      append_jsonl(sweep_dir / SWEEP_LOG, {**rec, "action": "failed",
                                           "error": f"{type(e).__name__}: {str(e)[:500]}"})
      ctx["write_index"]()
    return None


def _sweep_run(r: Run, sweep_dir: Path, ctx: dict, host_index: int, kill_at) -> None:
  """Skip, resume or start run ``r``; log the action; mark it DONE when it finished."""
  is_main = jax.process_index() == 0
  wd, steps = sweep_dir / r.name, r.config.train.steps
  state = run_state(wd, steps)
  start = _latest_step(wd) if state == "partial" else 0
  action = {"done": "skipped", "partial": "resumed", "new": "new"}[state]
  rec = {"time": time.time(), "host": host_index, "process": jax.process_index(),
         "run": r.name, "action": action, "start_step": start}
  if state == "done":
    log.info("sweep: %s is finished; skipped", r.name)
    if is_main:
      append_jsonl(sweep_dir / SWEEP_LOG, rec)
    return
  log.info("sweep: %s run %s (from step %s)", action, r.name, start)
  stop_after = kill_at[1] if kill_at is not None and kill_at[0] == r.index else None
  summary = _run_one(r, sweep_dir, ctx, rec, stop_after)
  if summary is None:
    return
  if stop_after is not None:
    if is_main:
      append_jsonl(sweep_dir / SWEEP_LOG, {**rec, "end_step": summary.get("step"),
                                           "killed": True})
    log.warning("sweep: test hook kill_at=%s: killing this process", kill_at)
    os.kill(os.getpid(), signal.SIGKILL)
  if is_main:
    if summary.get("step") == steps:
      mark_finished(wd, summary, r.config.to_dict())
    append_jsonl(sweep_dir / SWEEP_LOG, {**rec, "end_step": summary.get("step")})
    ctx["write_index"]()


def run_sweep(grid, sweep_dir, *, host_index: int = 0, num_hosts: int = 1,
              dry_run: bool = False, kill_at: tuple[int, int] | None = None,
              train_fn: Callable | None = None, quiet: bool = True) -> list[dict]:
  """Run (this host's share of) a sweep; returns the index rows.

  ``grid``: a grid dict or a path to a grid JSON. ``kill_at=(run_index, step)`` is a
  test hook: that run stops at ``step`` (its checkpoint there is saved) and the process
  kills itself with SIGKILL, as a preemption would.
  """
  grid = load_grid(grid) if not isinstance(grid, dict) else dict(grid)
  runs = expand(grid)
  sweep_dir = upath(sweep_dir)
  if num_hosts < 1 or not 0 <= host_index < num_hosts:
    raise ValueError(f"--host_index={host_index} must be in [0, --num_hosts={num_hosts})")
  host_of = lambda r: r.index % num_hosts  # noqa: E731
  if dry_run:
    for r in runs:
      state = run_state(sweep_dir / r.name, r.config.train.steps)
      print(f"{r.index:4d} host {host_of(r)} {state:8s} {r.name}")
    return []
  sweep_dir.mkdir(parents=True, exist_ok=True)
  mine = [r for r in runs if host_of(r) == host_index]
  ctx = {"datasets": {}, "train_fn": train_fn or train, "quiet": quiet,
         "write_index": lambda: write_index(sweep_dir, grid, runs,
                                            index_rows(runs, sweep_dir, host_of))}
  log.info("sweep %s: %d runs, %d on host %d/%d", sweep_dir, len(runs), len(mine), host_index,
           num_hosts)
  for r in mine:
    _sweep_run(r, sweep_dir, ctx, host_index, kill_at)
  rows = index_rows(runs, sweep_dir, host_of)
  if jax.process_index() == 0:
    write_index(sweep_dir, grid, runs, rows)
  return rows
