"""Sweeps: a grid over config keys, expanded to named groups and run by the experiment runner.

Grid file (JSON)::

    {
      "name": "head-rank",                       # optional, recorded in the index
      "base": "tiny",                            # a named config, or a .json config path
                                                 # (relative to the grid file)
      "overrides": {"train.steps": 200},         # applied to every run (dotted keys or
                                                 # nested sections)
      "grid": {"model.head.rank": [2, 4, 8],     # cartesian product over these keys
               "train.seed": [0, 1]},            # (file order, the last varies fastest)
      "runs": [{"train.lr": 1e-3},               # optional: explicit variants, crossed
               {"train.lr": 3e-3}]               # with the grid
    }

Every run's config is built and validated when the grid is expanded, so a bad value fails
before anything trains. A run's name is its swept keys' last components with their values
(``rank=2,seed=0``; a full dotted key where the last component is ambiguous; characters outside
``[A-Za-z0-9._=,+-]`` become ``_``; long or colliding names get a short hash), its workdir
``SWEEP_DIR/runs/<name>``. Runs are trained by ``sbjax.experiment.runner`` (finished runs are
read back, interrupted ones resumed; a run that fails is recorded and the sweep goes on). With
``num_hosts > 1`` host ``h`` trains the runs with ``index % num_hosts == h``. ``index.csv`` and
``index.json`` (name, status, swept values, summary) are rebuilt from the workdirs, so every
host sees every run's state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any

from sbjax import configs, overrides
from sbjax.analysis.table import write_csv
from sbjax.atomic import atomic_write_text
from sbjax.checkpoint import list_steps
from sbjax.config import Config
from sbjax.experiment import Experiment, Group, Preset, runner
from sbjax.paths import upath
from sbjax.train.done import finished

GRID_KEYS = {"name", "base", "overrides", "grid", "runs"}


@dataclasses.dataclass
class Run:
  index: int
  name: str
  overrides: dict  # the swept keys' values (dotted key -> value)
  config: Config


def _flatten(d: dict) -> dict:
  """Nested sections ({"model": {"d_model": ..}}) as dotted keys; other keys as they are."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and k in ("model", "data", "train", "mesh"):
      out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
    else:
      out[k] = v
  return out


def load_grid(path) -> dict:
  path = upath(path)
  try:
    grid = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"sweep grid {path} is not valid JSON: {e}") from None
  if not isinstance(grid, dict):
    raise ValueError(f"sweep grid {path}: expected a JSON object with keys {sorted(GRID_KEYS)}")
  return {**grid, "_dir": str(path.parent)}


def _base(grid: dict) -> Config:
  """The grid's base: a config name, or a .json config (relative to the grid file)."""
  base = grid.get("base", "tiny")
  if str(base).endswith(".json") and not Path(base).is_absolute():
    cand = Path(grid.get("_dir", ".")) / base
    base = str(cand) if cand.exists() else base
  return configs.load(str(base))


def _fmt(v: Any) -> str:
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, (list, tuple)):
    return "-".join(_fmt(x) for x in v)
  return repr(v) if isinstance(v, float) else str(v)


def _hash(obj) -> str:
  return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def run_name(over: dict, keys: list | None = None) -> str:
  """Readable, filesystem-safe, stable name of a run from its swept values (``keys``: every
  swept key of the grid, which decides whether a last component is ambiguous)."""
  if not over:
    return "run"
  keys = list(keys or over)
  last = [k.split(".")[-1] for k in keys]
  short = {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}
  name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(f"{short[k]}={_fmt(v)}"
                                                      for k, v in over.items()))
  return name if len(name) <= 100 else name[:100] + "-" + _hash(over)


def _points(grid: dict) -> tuple[list[dict], list[str]]:
  """The swept values of every run (grid x variants) and the swept keys, in order."""
  axes = grid.get("grid") or {}
  if not isinstance(axes, dict) or any(not isinstance(v, list) or not v for v in axes.values()):
    raise ValueError("sweep grid: 'grid' must map dotted keys to non-empty lists of values")
  variants = grid.get("runs") or [{}]
  if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
    raise ValueError("sweep grid: 'runs' must be a list of objects of dotted keys -> values")
  variants = [_flatten(v) for v in variants]
  swept = list(axes) + [k for v in variants for k in v if k not in axes]
  swept = list(dict.fromkeys(swept))
  points = [{**dict(zip(axes, combo)), **var}
            for combo in itertools.product(*axes.values()) for var in variants]
  return [{k: p[k] for k in swept if k in p} for p in points], swept


def expand(grid: dict) -> list[Run]:
  """The runs of a grid (module doc), configs validated."""
  unknown = sorted(set(grid) - GRID_KEYS - {"_dir"})
  if unknown:
    raise ValueError(f"sweep grid: unknown top-level keys {unknown}; allowed: {sorted(GRID_KEYS)}")
  points, swept = _points(grid)
  common, base = _flatten(grid.get("overrides") or {}), _base(grid)
  names = [run_name(p, swept) for p in points]
  names = [n if names.count(n) == 1 else f"{n}-{_hash(p)}" for n, p in zip(names, points)]
  if len(set(names)) != len(names):
    raise ValueError("sweep grid: runs with identical settings; remove the duplicates")
  runs = []
  for i, (name, p) in enumerate(zip(names, points)):
    try:
      runs.append(Run(i, name, p, overrides.apply(base, {**common, **p, "name": name})))
    except ValueError as e:
      raise ValueError(f"sweep grid: run {name!r}: {e}") from None
  return runs


def run_state(workdir: Path) -> str:
  """'done' | 'partial' | 'new' (the one "done" rule: ``sbjax.train.done``)."""
  if finished(workdir) is not None:
    return "done"
  return "partial" if workdir.exists() and list_steps(workdir) else "new"


def index_rows(runs: list[Run], sweep_dir: Path, failed: dict) -> list[dict]:
  rows = []
  for r in runs:
    wd = sweep_dir / "runs" / r.name
    state = run_state(wd)
    status = "failed" if r.name in failed and state != "done" else state
    rows.append({"name": r.name, "status": status, **r.overrides, **(finished(wd) or {}),
                 "error": failed.get(r.name, "") if status == "failed" else ""})
  return rows


def run_sweep(grid, sweep_dir, *, host_index: int = 0, num_hosts: int = 1,
              dry_run: bool = False, verbose: bool = False) -> list[dict]:
  """Run (this host's share of) a sweep; returns the index rows (module doc)."""
  grid = load_grid(grid) if not isinstance(grid, dict) else dict(grid)
  runs, sweep_dir = expand(grid), upath(sweep_dir)
  if num_hosts < 1 or not 0 <= host_index < num_hosts:
    raise ValueError(f"--host_index={host_index} must be in [0, --num_hosts={num_hosts})")
  mine = [r for r in runs if r.index % num_hosts == host_index]
  if dry_run:
    for r in runs:
      print(f"{r.index:4d} host {r.index % num_hosts} {run_state(sweep_dir / 'runs' / r.name):8s}"
            f" {r.name}")
    return []
  exp = Experiment("sweep", {"grid": Preset(str(grid.get("base", "tiny")), {}, None)},
                   lambda ctx: [Group(r.name, [r.config], [r.overrides]) for r in mine])
  failed = runner.run(exp, sweep_dir, "grid", verbose=verbose, keep_going=True,
                      table=f"runs_host{host_index}.csv" if num_hosts > 1 else "runs.csv",
                      lock=num_hosts == 1).failed
  rows = index_rows(runs, sweep_dir, failed)
  atomic_write_text(sweep_dir / "index.json", json.dumps(
      {"name": grid.get("name", ""), "swept_keys": _points(grid)[1], "runs": rows}, indent=1,
      default=str))
  write_csv(sweep_dir / "index.csv", rows)
  return rows
