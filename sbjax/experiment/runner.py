"""The one experiment runner: ``run(experiment, out, preset, data)``.

It holds ``OUT``'s lock (one writer per output folder), then for each group of
``experiment.plan(ctx)``: trains it unless it is finished (``sbjax.train.train_once``: the one
"done" rule, ``WORKDIR/DONE``), measures its checkpoints (``sbjax.analysis.measure``: each step
once, damaged steps set aside) and rewrites ``OUT/runs.csv`` (one row per member: its labels
and the run's summary) and ``OUT/checkpoints.csv`` (one row per member and measured step).
Then the experiment's own tables and figures. ``OUT/run.json`` records the preset, the
seconds and CPU seconds of each group and of the call, and the versions. A rerun reads back
every finished group and measured step, so it redoes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sys
import time

import jax

from sbjax.analysis.measure import measure_checkpoints
from sbjax.analysis.table import write_csv
from sbjax.atomic import atomic_write_text
from sbjax.experiment.context import Context, digest
from sbjax.experiment.declare import Experiment, Group
from sbjax.paths import upath
from sbjax.train import train_once
from sbjax.train.lock import workdir_lock

log = logging.getLogger("sbjax")

SUMMARY = ("step", "eval_loss", "eval_acc", "loss", "n_params")


def _datasets(ctx: Context, group: Group):
  if group.dataset is not None:
    return group.dataset
  seeds = {c.train.data_seed for c in group.configs}
  if len(seeds) == 1:
    return ctx.dataset(group.configs[0])
  return [ctx.dataset(c) for c in group.configs]


def _train(ctx: Context, group: Group, say) -> list[dict]:
  dirs = ctx.workdirs(group)
  one = len(dirs) == 1
  sums = train_once(group.configs[0] if one else list(group.configs), dirs[0] if one else dirs,
                    dataset=_datasets(ctx, group), quiet=not say.verbose)
  return [sums] if one else sums


def _measure(ctx: Context, exp: Experiment, group: Group) -> list[dict]:
  rows = []
  for j, (cfg, wd) in enumerate(zip(group.configs, ctx.workdirs(group))):
    key = digest([exp.name, exp.version, ctx.preset, cfg.to_dict()])
    m = measure_checkpoints(
        wd, lambda steps, params, j=j: exp.measure(ctx, group, j, steps, params), key=key,
        steps=[-1] if exp.measure_steps == "final" else None, chunk=exp.measure_chunk)
    rows += [{"group": group.name, "member": j, **group.labels[j], **r} for r in m.rows]
    ctx.set_aside[f"{group.name}/{j}"] = m.set_aside
  return rows


class _Say:
  def __init__(self, name: str, verbose: bool):
    self.name, self.verbose = name, verbose

  def __call__(self, text: str) -> None:
    if self.verbose:
      sys.stderr.write(f"[{self.name}] {text}\n")


def _cpu() -> float:
  t = __import__("os").times()
  return t.user + t.system + t.children_user + t.children_system


def _group(ctx: Context, exp: Experiment, group: Group, say) -> tuple[list, list]:
  """Train (or read back) and measure one group: (its runs.csv rows, its checkpoint rows)."""
  say(f"{group.name} ({len(group.configs)} member{'s' * (len(group.configs) > 1)})")
  sums = _train(ctx, group, say)
  rows = [{"group": group.name, "member": j, **group.labels[j],
           **{k: s.get(k) for k in SUMMARY}} for j, s in enumerate(sums)]
  ctx.results[group.name], ctx.groups[group.name] = rows, group
  ctx.measured[group.name] = _measure(ctx, exp, group) if exp.measure is not None else []
  return rows, ctx.measured[group.name]


def run(exp: Experiment, out, preset: str = "test", data: str | None = None, *,
        verbose: bool = True, keep_going: bool = False, lock: bool = True,
        table: str = "runs.csv") -> Context:
  """Run (or finish) ``exp`` at ``preset`` into ``out`` (module doc); returns its context.
  ``keep_going``: a group that fails is logged and kept in ``ctx.failed`` and the others go on
  (a sweep); ``lock`` False leaves the output lock to the caller (several hosts sharing one
  folder, each run still locked by its trainer); ``table``: the name of the runs table."""
  p = exp.preset(preset) if isinstance(preset, str) else preset
  ctx = Context(upath(out), preset if isinstance(preset, str) else "custom", p, data or None)
  say, writer = _Say(exp.name, verbose), jax.process_index() == 0
  plan = iter(exp.plan(ctx))
  first = next(plan, None)  # a bad preset or corpus is refused before OUT exists
  if first is not None:
    _datasets(ctx, first)
  with workdir_lock(ctx.out) if lock and writer else contextlib.nullcontext():
    t0, c0, runs, points, groups = time.time(), _cpu(), [], [], {}
    for group in itertools.chain([first] if first else [], plan):
      t, c = time.time(), _cpu()
      try:
        rows, measured = _group(ctx, exp, group, say)
      except Exception as e:  # noqa: BLE001 - a sweep records it and goes on
        if not keep_going:
          raise
        log.error("%s: %s failed: %s: %s", exp.name, group.name, type(e).__name__, e)
        ctx.failed[group.name] = f"{type(e).__name__}: {e}"
        continue
      runs, points = runs + rows, points + measured
      if writer:
        write_csv(ctx.out / table, runs)
        if measured:
          write_csv(ctx.out / "checkpoints.csv", points)
      groups[group.name] = {"seconds": round(time.time() - t, 1),
                            "cpu_seconds": round(_cpu() - c, 1)}
    if writer and exp.tables is not None:
      exp.tables(ctx)
    if writer and exp.figures is not None:
      exp.figures(ctx.out)
    if writer:
      _record(ctx, exp, groups, time.time() - t0, _cpu() - c0)
  return ctx


def _record(ctx: Context, exp: Experiment, groups: dict, seconds: float, cpu: float) -> None:
  from sbjax import __version__  # noqa: PLC0415

  atomic_write_text(ctx.out / "run.json", json.dumps({
      "experiment": exp.name, "preset": ctx.preset_name, "data": ctx.data,
      "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "groups": groups,
      "set_aside": {k: v for k, v in ctx.set_aside.items() if v},
      "sbjax": __version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
      "command": " ".join(sys.argv)}, indent=1))
