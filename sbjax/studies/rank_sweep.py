"""Head-rank sweeps (Godey et al. 2024, E5): head ranks x learning rates, best LR per rank.

A :class:`Plan` names a base config (trunk, data, training), a list of head ranks and
learning-rate grids. :func:`run_plan` trains every run of the plan under ``OUT/runs/`` and
writes ``OUT/head_rank.csv``. An LR grid of protocol ``full`` or ``b`` (same shapes) is one
vmapped run of N members (``sbjax.train.train``; one compilation for the grid) in
``OUT/runs/<group>/member_<i>``; protocol ``a`` runs (frozen trunk) are separate runs in
``OUT/runs/<run>``, unless ``Plan.head_population``: then protocol a's lowrank heads of every
rank and head lr are ONE population (one compile) of ``padded_lowrank`` heads, pad = the
largest rank (``sbjax.heads.padded_lowrank``: each member equals its rank-r lowrank run up to
float32 summation order), in ``OUT/runs/a-lowrank-pad<R>/member_<i>``. The protocols are:

* ``full``: the reference, a dense (full-rank) head trained from scratch over the LR grid.
  Its best run gives the trunk of protocol ``a`` and "the full-rank head" (saved as
  ``OUT/full_head.npy``, V x d, for W-error).
* ``a``: frozen trunk. The best ``full`` run's trunk is loaded (``train.init_from``) and
  only a new head is trained (``train.freeze_trunk``), for ``head_steps`` steps (checkpoints
  at step 0 and the end: every member's saves hold the whole model). The trunk
  is that run's last step (``Plan.trunk = "last"``) or its checkpoint of the lowest
  validation loss (``"best"``: the eval steps > 0 that have a checkpoint; ties: the earliest);
  ``plan.json`` records the step and its loss as ``trunk_step`` and ``trunk_eval_loss``.
* ``b``: from scratch with the head (``train.steps`` steps).

Heads: ``lowrank`` (W = A B, rank r) at every rank of the plan; ``mos`` (mixture of
softmaxes) with ``n_mix`` components in ``mos_protocols``. Parameter counts come from
``sbjax.heads.head_param_count``: lowrank(r) = V r + r d, mos(m) = V d + m d^2 + 2 m d + m.
A mos head always holds a V x d matrix, so it can only match the largest lowrank heads;
``matched_rank`` is the plan rank whose lowrank head has the nearest parameter count and
``param_ratio`` = params / lowrank_params(matched_rank).

Best learning rate: in each group (protocol, head, rank, n_mix) the run with the smallest
validation loss is flagged ``best`` = 1 (ties: the first in grid order):

    best(g) = argmin_{lr in grid} eval_loss(g, lr)

Resume: a run is finished when ``RUN/DONE`` exists (it holds the run's summary); finished
runs are read back, never retrained, and a run with checkpoints short of its steps is
resumed by ``sbjax.train.train``. The CSV is rewritten after every run, so a killed sweep
leaves a valid (partial) table.

CSV columns (:data:`COLUMNS`): protocol, head, rank, n_mix, matched_rank, lr, steps,
params (head parameters), param_ratio, n_params (whole model), eval_loss, eval_acc
(top-1), best, run (the run directory under ``OUT/runs``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import heads as heads_lib
from sbjax.analysis.table import atomic_write_json, read_csv, write_csv
from sbjax.config import Config, ModelConfig
from sbjax.heads import head_param_count
from sbjax.heads.padded_lowrank import padding_is_zero
from sbjax.paths import upath
from sbjax.train import member_dir, read_metrics, train_once
from sbjax.train.done import finished

log = logging.getLogger("sbjax")

PROTOCOLS = ("full", "a", "b")
COLUMNS = ("protocol", "head", "rank", "n_mix", "matched_rank", "lr", "steps", "params",
           "param_ratio", "n_params", "eval_loss", "eval_acc", "best", "run")
CSV_NAME = "head_rank.csv"
TRUNKS = ("last", "best")
FULL_HEAD = "full_head.npy"


def rank_grid(d: int) -> tuple[int, ...]:
  """{1, 2, 4, ..., d}: powers of two below d, then d itself."""
  if d < 1:
    raise ValueError(f"rank_grid: d={d} must be >= 1")
  out, r = [], 1
  while r < d:
    out.append(r)
    r *= 2
  return tuple(out + [d])


@dataclasses.dataclass(frozen=True)
class Plan:
  """What to train. ``base.model`` gives the trunk (its head fields are replaced per run),
  ``base.train`` the schedule of ``full`` and ``b`` runs (its ``lr`` is replaced by the grid)."""

  base: Config
  ranks: tuple = ()  # () = rank_grid(d_model)
  lrs: tuple = (1e-3, 3e-3)  # LR grid of protocols full and b
  head_lrs: tuple = (3e-3, 1e-2)  # LR grid of protocol a
  head_steps: int = 0  # steps of protocol a; 0 = base.train.steps
  protocols: tuple = ("a", "b")  # besides "full", which always runs
  mos_mix: tuple = ()  # n_mix values of mos heads
  mos_protocols: tuple = ("b",)
  mos_lrs: tuple = ()  # () = the protocol's own grid
  population: bool = True  # train each LR grid of protocols full/b as one vmapped population
  head_population: bool = False  # protocol a's lowrank heads as one padded population
  trunk: str = "last"  # protocol a's trunk: the best full run's "last" step or "best" eval

  def __post_init__(self):
    d = self.base.model.d_model
    ranks = tuple(sorted(set(int(r) for r in (self.ranks or rank_grid(d)))))
    bad = [r for r in ranks if not 1 <= r <= d]
    if bad:
      raise ValueError(f"head-rank plan: ranks {bad} are outside 1 .. d_model={d}; "
                       "choose ranks <= the model width")
    object.__setattr__(self, "ranks", ranks)
    for name in ("lrs", "head_lrs", "mos_lrs"):
      v = tuple(float(x) for x in getattr(self, name))
      if any(not (x > 0 and math.isfinite(x)) for x in v):
        raise ValueError(f"head-rank plan: {name}={v} must hold positive learning rates")
      if len(set(v)) != len(v):
        raise ValueError(f"head-rank plan: {name}={v} has repeated values")
      object.__setattr__(self, name, v)
    if not self.lrs:
      raise ValueError("head-rank plan: lrs is empty; give at least one learning rate")
    for name in ("protocols", "mos_protocols"):
      v = tuple(getattr(self, name))
      unknown = [p for p in v if p not in ("a", "b")]
      if unknown:
        raise ValueError(f"head-rank plan: {name} {unknown} unknown; allowed: a, b")
      object.__setattr__(self, name, v)
    if "a" in self.protocols + (self.mos_protocols if self.mos_mix else ()) and not self.head_lrs:
      raise ValueError("head-rank plan: protocol a needs head_lrs (its learning-rate grid)")
    mix = tuple(int(m) for m in self.mos_mix)
    if any(m < 1 for m in mix):
      raise ValueError(f"head-rank plan: mos_mix={mix} must hold integers >= 1")
    object.__setattr__(self, "mos_mix", mix)
    if self.head_steps < 0:
      raise ValueError(f"head-rank plan: head_steps={self.head_steps} must be >= 0")
    if self.trunk not in TRUNKS:
      raise ValueError(f"head-rank plan: trunk={self.trunk!r} unknown; allowed: "
                       f"{' | '.join(TRUNKS)}")

  @property
  def d_model(self) -> int:
    return self.base.model.d_model


@dataclasses.dataclass(frozen=True)
class RunSpec:
  protocol: str  # full | a | b
  head: str  # dense | lowrank | mos
  rank: int  # lowrank rank; d_model for dense and mos
  n_mix: int  # mos components; 0 otherwise
  lr: float

  @property
  def group(self) -> tuple:
    return (self.protocol, self.head, self.rank, self.n_mix)

  @property
  def name(self) -> str:
    what = {"dense": "dense", "lowrank": f"r{self.rank}", "mos": f"mos{self.n_mix}"}[self.head]
    return f"{self.protocol}-{what}-lr{self.lr:g}"


def specs(plan: Plan) -> list[RunSpec]:
  """Every run of the plan, in training order (full first: protocol a needs its trunk)."""
  d = plan.d_model
  out = [RunSpec("full", "dense", d, 0, lr) for lr in plan.lrs]
  for p in ("b", "a"):
    grid = plan.head_lrs if p == "a" else plan.lrs
    if p in plan.protocols:
      out += [RunSpec(p, "lowrank", r, 0, lr) for r in plan.ranks for lr in grid]
    if p in plan.mos_protocols:
      out += [RunSpec(p, "mos", d, m, lr) for m in plan.mos_mix for lr in (plan.mos_lrs or grid)]
  return out


def _head_fields(kind: str) -> set:
  return {f.name for f in dataclasses.fields(heads_lib.get(kind).config)}


def model_config(base: ModelConfig, spec: RunSpec, vocab_size: int | None = None) -> ModelConfig:
  """The base model with the run's head: its kind's own ``rank`` / ``n_mix`` from the spec,
  its other fields from the base head when that is of the same kind, else the defaults."""
  used = _head_fields(spec.head)
  own = {k: v for k, v in (("rank", spec.rank), ("n_mix", spec.n_mix)) if k in used}
  start = base.head if base.head.kind == spec.head else spec.head
  kw = dict(head=heads_lib.head_config(start, **own))
  if vocab_size is not None:
    kw["vocab_size"] = vocab_size
  return dataclasses.replace(base, **kw)


def run_config(plan: Plan, spec: RunSpec, trunk_dir: str = "", trunk_step: int = -1,
               pad: int = 0) -> Config:
  """The Config of one run. Protocol a needs ``trunk_dir`` (the best full run) and loads its
  step ``trunk_step`` (-1: the newest); ``pad`` > 0: the lowrank head as a ``padded_lowrank``
  head of that width (a member of a padded population)."""
  base = plan.base
  tc = dataclasses.replace(base.train, lr=spec.lr)
  if spec.protocol == "a":
    if not trunk_dir:
      raise ValueError("protocol a needs the trunk of a finished full-rank run")
    steps = plan.head_steps or base.train.steps
    tc = dataclasses.replace(tc, steps=steps, freeze_trunk=True, init_from=str(trunk_dir),
                             init_step=trunk_step, eval_every=min(tc.eval_every, steps),
                             ckpt_every=steps,  # a head: step 0 and its end
                             warmup_steps=min(tc.warmup_steps, max(steps // 10, 1)))
  mc = model_config(base.model, spec)
  if pad:
    mc = dataclasses.replace(mc, head=heads_lib.head_config(
        "padded_lowrank", rank=spec.rank, pad=pad, init=mc.head.init))
  return base.replace(model=mc, train=tc, name=f"{base.name}-{spec.name}")


def matched_rank(mc: ModelConfig, params: int, ranks: Sequence[int]) -> tuple[int, float]:
  """(rank, params / lowrank_params(rank)) of the plan rank nearest in head parameters."""
  def lr_params(r):
    return head_param_count(dataclasses.replace(mc, head=heads_lib.head_config("lowrank", rank=r)))
  best = min(ranks, key=lambda r: (abs(lr_params(r) - params), r))
  return best, params / lr_params(best)


def mark_best(rows: list[dict]) -> list[dict]:
  """Set ``best`` = 1 on the smallest-eval_loss row of each (protocol, head, rank, n_mix)."""
  groups: dict[tuple, list[int]] = {}
  for i, r in enumerate(rows):
    groups.setdefault((r["protocol"], r["head"], int(r["rank"]), int(r["n_mix"])), []).append(i)
  for idx in groups.values():
    finite = [i for i in idx if math.isfinite(float(rows[i]["eval_loss"]))]
    win = min(finite, key=lambda i: float(rows[i]["eval_loss"])) if finite else None
    for i in idx:
      rows[i]["best"] = int(i == win)
  return rows


def best_rows(rows: Sequence[dict], protocol: str, head: str = "lowrank") -> list[dict]:
  """The best-LR rows of one protocol and head kind, sorted by rank and n_mix."""
  sel = [r for r in rows if r["protocol"] == protocol and r["head"] == head and int(r["best"])]
  return sorted(sel, key=lambda r: (int(r["rank"]), int(r["n_mix"])))


def _row(plan: Plan, spec: RunSpec, cfg: Config, summary: dict, vocab_size: int) -> dict:
  mc = model_config(cfg.model, spec, vocab_size)
  params = head_param_count(mc)
  explicit = "rank" in _head_fields(spec.head)  # a rank-r head: no matching needed
  mr, ratio = (spec.rank, 1.0) if explicit else matched_rank(mc, params, plan.ranks)
  return {"protocol": spec.protocol, "head": spec.head, "rank": spec.rank, "n_mix": spec.n_mix,
          "matched_rank": mr, "lr": spec.lr, "steps": cfg.train.steps, "params": params,
          "param_ratio": round(ratio, 6), "n_params": summary.get("n_params"),
          "eval_loss": float(summary.get("eval_loss", math.nan)),
          "eval_acc": float(summary.get("eval_acc", math.nan)), "best": 0,
          "run": spec.name}


def save_full_head(out: Path, trunk_dir: Path, step: int | None = None) -> np.ndarray:
  """Write ``OUT/full_head.npy``: the V x d head matrix of the best full run at ``step``
  (None: its last step; the step of protocol a's trunk)."""
  cfg, params, _ = ckpt.load_params(trunk_dir, step)
  w = np.asarray(heads_lib.head_matrix(params, cfg.model), np.float32)
  with upath(out / FULL_HEAD).open("wb") as f:  # local or gs:// (sbjax.paths)
    np.save(f, w, allow_pickle=False)
  return w


class Trunk(NamedTuple):
  """Protocol a's trunk: the best full run's directory, its step (-1: the newest) and the
  validation loss there (NaN when not evaluated at it)."""

  dir: Path
  step: int
  eval_loss: float


def trunk_of(plan: Plan, out, rows: Sequence[dict]) -> Trunk:
  """The trunk of ``plan.trunk`` (module doc): the last step, or the checkpointed eval step
  after step 0 of the lowest validation loss (ties: the earliest)."""
  d = best_full_dir(out, rows)
  evals = {int(r["step"]): float(r["eval_loss"]) for r in read_metrics(d) if "eval_loss" in r}
  if plan.trunk == "last":
    last = ckpt.list_steps(d)[-1]
    return Trunk(d, -1, evals.get(last, math.nan))
  have = [s for s in ckpt.list_steps(d) if s > 0 and s in evals and math.isfinite(evals[s])]
  if not have:
    raise ValueError(f"head-rank plan: trunk='best' but {d} has no checkpoint at an eval step; "
                     "set train.ckpt_every to a multiple of train.eval_every")
  step = min(have, key=lambda s: (evals[s], s))
  return Trunk(d, step, evals[step])


def _group_dir(specs_: Sequence[RunSpec]) -> str:
  s0 = specs_[0]
  if len({s.rank for s in specs_}) > 1:  # a padded population of ranks
    return f"{s0.protocol}-lowrank-pad{max(s.rank for s in specs_)}"
  what = {"dense": "dense", "lowrank": f"r{s0.rank}", "mos": f"mos{s0.n_mix}"}[s0.head]
  return f"{s0.protocol}-{what}-lr" + "_".join(f"{s.lr:g}" for s in specs_)


def groups(plan: Plan) -> list[list[RunSpec]]:
  """The plan's runs grouped by (protocol, head, rank, n_mix), in training order; with
  ``plan.head_population`` protocol a's lowrank runs are one group (every rank and lr)."""
  out: dict[tuple, list[RunSpec]] = {}
  for s in specs(plan):
    padded = plan.head_population and s.protocol == "a" and "rank" in _head_fields(s.head)
    out.setdefault(("a", "lowrank-padded") if padded else s.group, []).append(s)
  return list(out.values())


def is_population(plan: Plan, grp: Sequence[RunSpec]) -> bool:
  """Whether ``run_plan`` trains the group ``grp`` as one population (module doc)."""
  if grp[0].protocol == "a":
    return plan.head_population and len({s.rank for s in grp}) > 1
  return plan.population and len(grp) > 1


def progress_units(plan: Plan) -> int:
  """How many progress messages ``run_plan`` sends: one per population, one per run."""
  return sum(1 if is_population(plan, g) else len(g) for g in groups(plan))


def _extra(hooks, done: bool, name: str, cfgs: list, dirs: list) -> list:
  """The caller's loop hooks for a run or population about to train (none when ``done``:
  every one of ``dirs`` is finished)."""
  if hooks is None or done:
    return []
  return list(hooks(name, cfgs, dirs))


def _check_padding(dirs) -> None:
  """Every padded member's padding is still exactly zero (``sbjax.heads.padded_lowrank``)."""
  for d in dirs:
    cfg, params, step = ckpt.load_params(d)
    if not padding_is_zero(params, cfg.model):
      raise RuntimeError(f"{d}: the padded head's columns >= rank {cfg.model.head.rank} are "
                         f"not zero at step {step}; its run is not the rank-r head's")


def group_configs(plan: Plan, grp: Sequence[RunSpec], trunk_dir: str = "",
                  trunk_step: int = -1) -> tuple[list[Config], int]:
  """The Configs ``run_plan`` trains the group ``grp`` with (protocol a's on the trunk
  ``trunk_dir`` at ``trunk_step``), and the pad of its heads (> 0: one population of padded
  heads, the largest rank; 0 otherwise)."""
  pad = max(s.rank for s in grp) if is_population(plan, grp) and grp[0].protocol == "a" else 0
  where = (trunk_dir, trunk_step)
  return [run_config(plan, s, *(where if s.protocol == "a" else ()), pad=pad)
          for s in grp], pad


def _train_group(plan: Plan, out: Path, grp: list, dataset, trunk: Trunk | None, tag: str,
                 say, quiet: bool, hooks) -> list[dict]:
  """Train (or read back) one group of ``run_plan``; its rows."""
  pop = is_population(plan, grp)
  where = (str(trunk.dir), trunk.step) if trunk is not None else ()
  cfgs, pad = group_configs(plan, grp, *where)
  if pop:
    gdir = _group_dir(grp)
    names = [f"{gdir}/member_{j}" for j in range(len(grp))]
    dirs = [member_dir(out / "runs" / gdir, j) for j in range(len(grp))]
    done = all(finished(d) is not None for d in dirs)  # read once
    what = "heads (ranks x lrs, padded)" if pad else "learning rates"
    say(f"{tag} {gdir} (population of {len(grp)} {what}): {'done' if done else 'training'}")
    sums = train_once(cfgs, dirs, dataset=dataset, quiet=quiet,
                      hooks=_extra(hooks, done, gdir, cfgs, dirs))
    if pad and not done:  # checked once, when trained
      _check_padding(dirs)
  else:
    names, sums = [s.name for s in grp], []
    for cfg, name in zip(cfgs, names):
      d = out / "runs" / name
      done = finished(d) is not None  # read once
      say(f"{tag} {name}: {'done' if done else 'training'}")
      sums.append(train_once(cfg, d, dataset=dataset, quiet=quiet,
                             hooks=_extra(hooks, done, name, [cfg], [d])))
  return [{**_row(plan, s, cfg, summ, dataset.vocab_size), "run": name}
          for s, cfg, summ, name in zip(grp, cfgs, sums, names)]


def run_plan(plan: Plan, out, dataset, *, progress: Callable[[str], None] | None = None,
             quiet: bool = True, hooks=None) -> list[dict]:
  """Train every run of ``plan`` into ``OUT/runs`` (skipping finished ones); returns the rows
  of ``OUT/head_rank.csv`` (also written after every group, with the best flags).

  With ``plan.population`` an LR grid of protocol full or b (same shapes, no frozen trunk) is
  trained as one population in ``OUT/runs/<group>/member_<i>``, and with
  ``plan.head_population`` protocol a's lowrank heads too (module doc); other runs are
  separate ``sbjax.train.train`` runs in ``OUT/runs/<run>``. ``hooks(name, cfgs, dirs)``:
  extra loop hooks for each run or population that is about to train (e.g. a time budget).
  """
  out = upath(out)
  (out / "runs").mkdir(parents=True, exist_ok=True)
  say = progress or (lambda s: log.info("%s", s))
  rows: list[dict] = []
  trunk = None
  todo = groups(plan)
  for i, grp in enumerate(todo):
    if grp[0].protocol == "a" and trunk is None:
      trunk = trunk_of(plan, out, rows)
    rows += _train_group(plan, out, grp, dataset, trunk, f"[{i + 1}/{len(todo)}]", say, quiet,
                         hooks)
    write_csv(out / CSV_NAME, mark_best(rows), COLUMNS)
  if trunk is None:  # no protocol-a group: the best full run, for full_head.npy and plan.json
    trunk = trunk_of(plan, out, rows)
  save_full_head(out, trunk.dir, None if trunk.step < 0 else trunk.step)
  atomic_write_json(out / "plan.json", {
      "ranks": plan.ranks, "lrs": plan.lrs, "head_lrs": plan.head_lrs,
      "head_steps": plan.head_steps or plan.base.train.steps, "protocols": plan.protocols,
      "mos_mix": plan.mos_mix, "mos_protocols": plan.mos_protocols, "mos_lrs": plan.mos_lrs,
      "population": plan.population, "head_population": plan.head_population,
      "trunk": plan.trunk, "trunk_step": trunk.step,
      "trunk_eval_loss": trunk.eval_loss if math.isfinite(trunk.eval_loss) else None,
      "full_run": str(trunk.dir.relative_to(out / "runs")),
      "vocab_size": dataset.vocab_size, "base": plan.base.to_dict()})
  return rows


def best_full_dir(out, rows: Sequence[dict] | None = None) -> Path:
  """The run directory of the best ``full`` (dense-head) run."""
  out = upath(out)
  rows = mark_best(list(rows)) if rows is not None else read_rows(out)
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])]
  if not full:
    raise FileNotFoundError(f"{out / CSV_NAME} has no finished full-rank run; run the sweep first")
  return out / "runs" / str(full[0]["run"])


def read_rows(out) -> list[dict]:
  """The rows of ``OUT/head_rank.csv`` (numbers as float, text as str)."""
  return read_csv(upath(out) / CSV_NAME)


def non_increasing(losses: Sequence[float], tol: float = 0.0) -> bool:
  """True when loss[i+1] <= loss[i] + tol for every consecutive pair."""
  x = np.asarray(losses, np.float64)
  return bool(np.all(np.diff(x) <= tol))


def longest_non_increasing(ranks: Sequence[int], losses: Sequence[float],
                           tol: float = 0.0) -> list[int]:
  """The longest run of consecutive ranks (in rank order) whose losses are non-increasing."""
  best: list[int] = []
  cur: list[int] = []
  for i, r in enumerate(ranks):
    if cur and losses[i] > losses[i - 1] + tol:
      cur = []
    cur.append(int(r))
    if len(cur) > len(best):
      best = list(cur)
  return best
