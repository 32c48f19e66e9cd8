"""``train(cfgs, workdirs)``: a run of N members as ONE composition of the loop and its hooks.

N = 1 (a Config and a workdir) is the plain run; N members (lists) train in one vmapped step
(``sbjax.train.members``). Every member's workdir is a normal run directory (config.json,
metrics.jsonl, its TensorBoard mirror, orbax checkpoints). Rerunning on existing workdirs
resumes every member at the newest step all of them restore
(``sbjax.checkpoint.restore_latest_common``); since batch i is a pure function of
(data_seed, i), the continued run equals an uninterrupted run bit for bit on CPU.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding

from sbjax import checkpoint as ckpt
from sbjax import data as data_lib
from sbjax import sharding as shd
from sbjax.config import Config
from sbjax.optim import gamma_fn, lr_schedule
from sbjax.paths import upath
from sbjax.train import device_batches
from sbjax.train import hooks as H
from sbjax.train.build import build
from sbjax.train.done import check_same, finished, mark_finished
from sbjax.train.lock import workdir_locks
from sbjax.train.loop import Schedule, run_loop
from sbjax.train.members import check_members
from sbjax.train.preempt import Preempted, Preemption
from sbjax.train.step import TrainState
from sbjax.train.workdir import (check_not_past, clean_for_resume, init_trunk_from,
                                 prepare_workdir, resolve_vocab, summary_from_metrics)

log = logging.getLogger("sbjax")


def make_dataset_for(cfg: Config, workdir):
  tc = cfg.train
  return data_lib.make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                               seed=tc.data_seed, workdir=None if workdir is None else str(workdir))


def check_eval_size(tc) -> None:
  """Refuse evaluation batches (kept in memory) beyond a quarter of this machine's memory."""
  need = tc.eval_batches * tc.batch_size * (tc.seq_len + 1) * 4  # int32 tokens
  have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  if need > have // 4:
    raise ValueError(f"invalid config: train.eval_batches={tc.eval_batches}: the evaluation "
                     f"batches would hold {need / 2**30:.1f} GiB of tokens, more than a quarter "
                     f"of this machine's {have / 2**30:.0f} GiB; ask for at most "
                     f"{max(1, have // 4 // (need // tc.eval_batches))}")


def _lists(cfgs, workdirs) -> tuple[list[Config], list[Path]]:
  """(configs, workdirs) as lists, checked before anything is written."""
  if isinstance(cfgs, Config):
    cfgs, dirs = [cfgs], [upath(workdirs)]
  else:
    cfgs, dirs = list(cfgs), [upath(d) for d in workdirs]
  if len(dirs) != len(cfgs):
    raise ValueError(f"train: {len(cfgs)} member configs but {len(dirs)} workdirs; give one "
                     "workdir per member (sbjax.train.members.member_dir)")
  check_eval_size(cfgs[0].train)
  return cfgs, dirs


def _datasets(cfgs, dirs, dataset, data_varies: bool) -> list:
  """One dataset (a batch shared by every member) or one per member (its own batches)."""
  if dataset is None:
    if data_varies:
      return [make_dataset_for(c, d) for c, d in zip(cfgs, dirs)]
    return [make_dataset_for(cfgs[0], dirs[0])]
  ds = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
  if len(ds) not in {1, len(cfgs)} or (data_varies and len(ds) == 1 < len(cfgs)):
    raise ValueError(f"train: {len(ds)} datasets for {len(cfgs)} members whose train.data_seed "
                     f"are {[c.train.data_seed for c in cfgs]}; pass one dataset (one data "
                     "seed for all), one per member, or none (built from the configs)")
  return ds


def _batches(datasets, fns, mesh):
  """``batches(i)``: the global batch of step i (a leading member axis: one per dataset)."""
  if len(datasets) == 1:
    return lambda i: shd.global_batch(datasets[0].train_batch(i), mesh)
  sh: NamedSharding = fns.batch_sh

  def get(i):
    local = np.stack([np.asarray(d.train_batch(i)) for d in datasets])
    if jax.process_count() == 1:
      return jax.device_put(local, sh)
    shape = (local.shape[0], local.shape[1] * jax.process_count()) + local.shape[2:]
    return jax.make_array_from_process_local_data(sh, local, shape)

  return get


def _step_fn(cfgs, fns, step=None):
  """``(state, batch) -> (state, metrics)``: ``step`` (default the build's) with the members'
  lr scales and weight decays."""
  step = fns.step if step is None else step
  if len(cfgs) == 1:
    return step
  base = cfgs[0].train.lr
  scales = jax.device_put(np.asarray([c.train.lr / base for c in cfgs], np.float32), fns.repl)
  wds = jax.device_put(np.asarray([c.train.weight_decay for c in cfgs], np.float32), fns.repl)
  return lambda state, batch: step(state, batch, scales, wds)


def _loop_inputs(cfgs, datasets, fns, mesh):
  """(step_fn, batches) of the loop: host batches, or the device tables of a step that draws
  its own batch (``sbjax.train.device_batches``)."""
  fused = device_batches.fused(fns, datasets)
  if fused is None:
    return _step_fn(cfgs, fns), _batches(datasets, fns, mesh)
  step, tables = fused
  return _step_fn(cfgs, fns, step), lambda i: tables


def _where(dirs) -> str:
  return str(dirs[0]) if len(dirs) == 1 else f"{dirs[0].parent} ({len(dirs)} members)"


def _start(cfgs, dirs, fns, quiet: bool, summary: dict):
  """(TrainState, meta per member, restored?) from the newest step every member restores,
  or a fresh init."""
  n = len(cfgs)
  moved = [[] for _ in cfgs]
  restored = None
  if any(ckpt.list_steps(d) for d in dirs):
    restored = ckpt.restore_latest_common(
        dirs, ckpt.abstract_with_shardings(fns.abstract, fns.p_sh1),
        ckpt.abstract_with_shardings(fns.abstract_opt, fns.o_sh1), moved=moved)
    if restored is None and not quiet:
      log.warning("no restorable checkpoint in %s (all moved aside to checkpoints_bad/); "
                  "starting from step 0", _where(dirs))
  summary["moved_aside"] = moved
  if restored is None:
    params = fns.init(fns.keys([c.train.seed for c in cfgs]))
    if cfgs[0].train.init_from:
      params = init_trunk_from(cfgs[0], params, fns.p_sh, members=n if n > 1 else 0)
    state = TrainState(jax.device_put(np.int32(0), fns.repl), params, fns.opt_init(params))
    return state, [{}] * n, False
  start, ps, opts, metas = restored
  for d, c in zip(dirs, cfgs):
    check_not_past(d, start, c.train.steps)
  if not quiet:
    log.info("resuming %s from step %d (data position %s)", _where(dirs), start,
             metas[0].get("data_position"))
  params, opt_state = fns.join(ps, opts)
  return TrainState(jax.device_put(np.int32(start), fns.repl), params, opt_state), metas, True


@functools.lru_cache(maxsize=32)
def _lr_fn(tc):
  return jax.jit(lr_schedule(tc))


def _stop_message(cfgs, dirs, ledger):
  def stop(j, i, m):
    who = (f"member {j} (seed {cfgs[j].train.seed}, lr {cfgs[j].train.lr}): "
           if len(cfgs) > 1 else "")
    return (f"{who}non-finite loss or gradient (loss={float(m['loss'])}, "
            f"grad_norm={float(m['grad_norm'])}) at step {i}; training stopped. The last good "
            f"checkpoint is step {ledger.last_saved[j]} in {dirs[j]}. Lower train.lr, or pass "
            f"train.skip_nonfinite_steps=N to skip up to N bad batches.")

  return stop


def _hooks(cfgs, dirs, fns, mngrs, ledger, eval_batches, *, quiet: bool):
  """NaN policy, train log, progress, evaluation, checkpoint, the records' sinks, the
  preemption flag (in order)."""
  tc, n = cfgs[0].train, len(cfgs)
  tokens = tc.batch_size * tc.seq_len
  name = dirs[0].name if n == 1 else f"{dirs[0].parent.name} x{n}"
  progress = ([H.Progress(name, tc.steps, tc.log_every, tokens_per_step=tokens * n)]
              if not quiet and jax.process_index() == 0 else [])
  records = H.Records(dirs, enabled=jax.process_index() == 0)

  def meta(j, step):
    return {"step": step, "data_position": step, "data_seed": cfgs[j].train.data_seed,
            "seed": cfgs[j].train.seed, "skipped_steps": ledger.skipped[j]}

  hooks = [H.NanPolicy(tc.skip_nonfinite_steps, ledger, _stop_message(cfgs, dirs, ledger)),
           H.TrainLog(records, tc.log_every, [_lr_fn(c.train) for c in cfgs], tokens,
                      [gamma_fn(c.train) for c in cfgs])]
  ev = H.Evaluate(lambda p: fns.evaluate(p, eval_batches), records, n)
  hooks += progress + [ev, H.Checkpoint(mngrs, ledger, fns.finite, fns.split, meta), records,
                       Preemption()]
  return hooks, ev


def _summaries(cfgs, dirs, fns, summary: dict, ev, ledger, end: int) -> list[dict]:
  n, n_params = len(cfgs), fns.model.param_count(fns.abstract)
  out = []
  for j, cfg in enumerate(cfgs):
    s = {k: v[j] if k in ("moved_aside", "tmp_moved_aside") else v for k, v in summary.items()}
    if ev.last[j].get("step", 0) > 0:
      s.update(ev.last[j])
    s.update({"step": end, "workdir": str(dirs[j]), "skipped_steps": ledger.skipped[j],
              "n_params": n_params})
    if n > 1:
      s.update({k: getattr(cfg.train, k) for k in ("seed", "lr", "data_seed", "weight_decay")})
    out.append(summary_from_metrics(dirs[j], s))
  return out


def _run(cfgs, dirs, datasets, fns, mesh, *, stop_after, quiet) -> list[dict]:
  """The loop of a built run (under ``set_mesh``): start, hooks, ``run_loop``, summaries."""
  tc, is_main = cfgs[0].train, jax.process_index() == 0
  mngrs = [ckpt.make_manager(d, c.train, async_save=tc.async_checkpoint)
           for d, c in zip(dirs, cfgs)]
  prefix = (lambda d: f"{d.name}/") if len(cfgs) > 1 else (lambda d: "")
  tmp = [len(clean_for_resume(d, prefix(d))) if is_main else 0 for d in dirs]
  summary: dict = {}
  state, metas, restored = _start(cfgs, dirs, fns, quiet, summary)
  for mngr in mngrs:
    mngr.reload()  # it may have listed steps that were moved aside
  start = int(state.step)
  summary.update({"start_step": start, "tmp_moved_aside": tmp})
  end = tc.steps if stop_after is None else min(tc.steps, stop_after)
  ledger = H.Ledger([int(m.get("skipped_steps", 0)) for m in metas], start if restored else None)
  eval_batches = [shd.global_batch(b, mesh) for b in datasets[0].eval_batches(tc.eval_batches)]
  hooks, ev = _hooks(cfgs, dirs, fns, mngrs, ledger, eval_batches, quiet=quiet)
  schedule = Schedule(ckpt.checkpoint_steps(tc), tc.eval_every, tc.steps, at_start=not restored)
  if end <= start and not quiet:
    log.info("%s is already at step %d (stop at %d): nothing to train", _where(dirs), start, end)
  pre = hooks[-1]
  state = run_loop(state, *_loop_inputs(cfgs, datasets, fns, mesh), start, end, hooks,
                   schedule, stop=pre)
  reached = int(jax.device_get(state.step))  # the real step: never the asked-for one
  if pre.saved_step is not None and reached < tc.steps:
    stop = Preempted(reached, _where(dirs))
    log.warning("%s", stop)
    raise stop
  return _summaries(cfgs, dirs, fns, summary, ev, ledger, reached)


def train(cfgs, workdirs, *, dataset=None, stop_after: int | None = None, quiet: bool = False,
          nan_at_step: int = -1):
  """Train (or resume) a run: ``cfgs`` a Config and ``workdirs`` its workdir (returns its
  summary dict), or lists of N member configs and workdirs (returns N summaries).
  ``dataset``: one dataset (shared batches) or one per member; None builds them from the
  configs. ``stop_after`` stops early at that step; ``nan_at_step`` (a test hook) makes the
  gradients of that step infinite. Each workdir is locked for the run (``sbjax.train.lock``);
  a workdir already past ``train.steps`` is refused. SIGTERM saves the current step and
  raises ``sbjax.train.preempt.Preempted`` (exit status 75; a rerun resumes)."""
  one = isinstance(cfgs, Config)
  cfgs, dirs = _lists(cfgs, workdirs)
  with workdir_locks(dirs, enabled=jax.process_index() == 0):
    out = _train_locked(cfgs, dirs, dataset=dataset, stop_after=stop_after, quiet=quiet,
                        nan_at_step=nan_at_step)
  return out[0] if one else out


def _train_locked(cfgs, dirs, *, dataset, stop_after=None, quiet=True, nan_at_step=-1):
  """``train`` once its workdirs are locked: data, config.json, build, loop."""
  for d, c in zip(dirs, cfgs):
    steps = ckpt.list_steps(d)
    check_not_past(d, steps[-1] if steps else 0, c.train.steps)
  varies = check_members(cfgs)
  datasets = _datasets(cfgs, dirs, dataset, varies.data)
  cfgs = [resolve_vocab(c, datasets[0].vocab_size) for c in cfgs]
  varies = varies._replace(data=len(datasets) > 1)
  for d, c in zip(dirs, cfgs):
    prepare_workdir(d, c, jax.process_index() == 0)
  tc = cfgs[0].train
  mesh = shd.make_mesh(cfgs[0].mesh)
  shd.check_divisible(cfgs[0].model, mesh, tc.batch_size, tc.grad_accum)
  with jax.set_mesh(mesh):
    fns = build(cfgs[0], mesh, nan_at_step, len(cfgs), varies)
    return _run(cfgs, dirs, datasets, fns, mesh, stop_after=stop_after, quiet=quiet)


def train_once(cfgs, workdirs, *, dataset=None, quiet: bool = True):
  """Train (or resume) a run unless every member is finished (``sbjax.train.done``); marks
  each member finished and returns its summary (a list for lists, as ``train``). A run that
  stops short of ``train.steps`` raises."""
  one = isinstance(cfgs, Config)
  cfgs, dirs = _lists(cfgs, workdirs)
  done = [finished(d) for d in dirs]
  for d, c, x in zip(dirs, cfgs, done):
    if x is not None:
      check_same(d, c.to_dict())
  if any(x is None for x in done):
    with workdir_locks(dirs, enabled=jax.process_index() == 0):  # the run and its DONE mark
      sums = _train_locked(cfgs, dirs, dataset=dataset, quiet=quiet)
      done = []
      for cfg, d, s in zip(cfgs, dirs, sums):
        if s.get("step") != cfg.train.steps or "eval_loss" not in s:
          raise RuntimeError(f"run {d} stopped at step {s.get('step')} of {cfg.train.steps}")
        done.append(mark_finished(d, s, cfg.to_dict()))
  return done[0] if one else done
