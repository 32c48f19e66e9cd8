"""``train(cfg, workdir)``: one run as a composition of the loop and its hooks.

Rerunning it on an existing workdir resumes from the newest restorable checkpoint; since
batch i is a pure function of (data_seed, i), the continued run's losses equal those of an
uninterrupted run bit for bit on CPU. Host syncs: the step is dispatched asynchronously and
its metrics are read one step late, except at boundaries (``sbjax.train.loop``), where the
parameters are checked to be finite before they are saved.
"""

from __future__ import annotations

import logging
import types
from pathlib import Path

import jax
import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import data as data_lib
from sbjax import sharding as shd
from sbjax.config import Config
from sbjax.model import Model
from sbjax.optim import gamma_fn, lr_schedule, make_optimizer
from sbjax.train import hooks as H
from sbjax.train.done import finished, mark_finished
from sbjax.train.loop import Schedule, run_loop
from sbjax.train.objective import loss_fn
from sbjax.train.programs import cached
from sbjax.train.step import (TrainState, all_finite_jit, evaluate, make_eval_step,
                              make_train_step, state_step)
from sbjax.train.workdir import (clean_for_resume, init_trunk_from, prepare_workdir,
                                 resolve_vocab, summary_from_metrics)

log = logging.getLogger("sbjax")


def make_dataset_for(cfg: Config, workdir: Path):
  tc = cfg.train
  return data_lib.make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                               seed=tc.data_seed, workdir=str(workdir))


@cached
def _build(cfg: Config, mesh, nan_at_step: int) -> types.SimpleNamespace:
  """The model, shardings and jitted functions of one run (called under ``set_mesh``); one
  build per process for runs that share their programs (``sbjax.train.programs``)."""
  tc, mc = cfg.train, cfg.model
  model = Model(mc)
  abstract = model.abstract_params(tc.seq_len)
  p_sh = shd.tree_shardings(abstract, mesh)
  tx = make_optimizer(tc, mc, abstract)
  abstract_opt = jax.eval_shape(tx.init, abstract)
  o_sh = shd.tree_shardings(abstract_opt, mesh)
  batch_sh, repl = shd.batch_sharding(mesh), shd.replicated(mesh)
  state_sh = TrainState(repl, p_sh, o_sh)
  step = make_train_step(model, tx, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                         nan_at_step=nan_at_step, loss=loss_fn(cfg, model))
  return types.SimpleNamespace(
      model=model, abstract=abstract, abstract_opt=abstract_opt, p_sh=p_sh, o_sh=o_sh,
      repl=repl,
      init=jax.jit(lambda k: model.init(k, 1, tc.seq_len), out_shardings=p_sh),
      opt_init=jax.jit(tx.init, out_shardings=o_sh),
      step=jax.jit(state_step(step), in_shardings=(state_sh, batch_sh),
                   out_shardings=(state_sh, repl), donate_argnums=(0,)),
      eval=jax.jit(make_eval_step(model), in_shardings=(p_sh, batch_sh), out_shardings=repl),
      lr=jax.jit(lr_schedule(tc)))


def _start(cfg: Config, workdir: Path, fns, quiet: bool, summary: dict):
  """(TrainState, meta, restored?) from the newest good checkpoint, or a fresh init."""
  bad_steps: list[int] = []
  restored = None
  if ckpt.list_steps(workdir):
    restored = ckpt.restore_latest_good(
        workdir, ckpt.abstract_with_shardings(fns.abstract, fns.p_sh),
        ckpt.abstract_with_shardings(fns.abstract_opt, fns.o_sh), moved=bad_steps)
    if restored is None and not quiet:
      log.warning("no restorable checkpoint in %s (all moved aside to checkpoints_bad/); "
                  "starting from step 0", workdir)
  summary["moved_aside"] = bad_steps
  if restored is None:
    params = fns.init(jax.random.key(cfg.train.seed))
    if cfg.train.init_from:
      params = init_trunk_from(cfg, params, fns.p_sh)
    return TrainState(jax.device_put(np.int32(0), fns.repl), params, fns.opt_init(params)), {}, False
  start, params, opt_state, meta = restored
  if opt_state is None:
    raise ValueError(f"{workdir} step {start} holds parameters only (an import); "
                     "train from it with --config.train.init_from instead")
  if not quiet:
    log.info("resuming %s from step %d (data position %s)", workdir, start,
             meta.get("data_position"))
  return TrainState(jax.device_put(np.int32(start), fns.repl), params, opt_state), meta, True


def _hooks(cfg: Config, workdir: Path, fns, mngr, ledger, eval_batches, *, quiet: bool,
           tensorboard: bool):
  """NaN policy, train log, progress, evaluation, checkpoint, the records' sinks (in order)."""
  tc = cfg.train
  records = H.Records([workdir], enabled=jax.process_index() == 0, tensorboard=tensorboard)

  def stop(_, i, m):
    return (f"non-finite loss or gradient (loss={float(m['loss'])}, "
            f"grad_norm={float(m['grad_norm'])}) at step {i}; training stopped. The last good "
            f"checkpoint is step {ledger.last_saved[0]} in {workdir}. Lower train.lr, or pass "
            "--config.train.skip_nonfinite_steps=N to skip up to N bad batches.")

  def meta(_, step):
    return {"step": step, "data_position": step, "data_seed": tc.data_seed, "seed": tc.seed,
            "skipped_steps": ledger.skipped[0]}

  tokens = tc.batch_size * tc.seq_len
  hooks = [H.NanPolicy(tc.skip_nonfinite_steps, ledger, stop),
           H.TrainLog(records, tc.log_every, [fns.lr], tokens, [gamma_fn(tc)])]
  if not quiet and records.enabled:  # process 0
    hooks.append(H.Progress(workdir.name, tc.steps, tc.log_every, tokens_per_step=tokens))
  ev = H.Evaluate(lambda p: [evaluate(fns.eval, p, eval_batches)], records, 1)
  hooks += [ev, H.Checkpoint([mngr], ledger, all_finite_jit,
                             lambda s: [(s.params, s.opt_state)], meta), records]
  return hooks, ev


def train(cfg: Config, workdir, *, dataset=None, stop_after: int | None = None,
          mesh=None, quiet: bool = False, tensorboard: bool = True,
          nan_at_step: int = -1) -> dict:
  """Train (or resume) a run in ``workdir``. ``stop_after`` stops early at that step
  (used by tests to simulate an interruption); ``nan_at_step`` (a test hook) makes the
  gradients of that step infinite. Returns a summary dict."""
  workdir = Path(workdir)
  is_main = jax.process_index() == 0
  tc = cfg.train
  dataset = dataset if dataset is not None else make_dataset_for(cfg, workdir)
  cfg = resolve_vocab(cfg, dataset.vocab_size)
  prepare_workdir(workdir, cfg, is_main)
  mesh = mesh if mesh is not None else shd.make_mesh(cfg.mesh)
  shd.check_divisible(cfg.model, mesh, tc.batch_size, tc.grad_accum)
  with jax.set_mesh(mesh):
    fns = _build(cfg, mesh, nan_at_step)
    mngr = ckpt.make_manager(workdir, tc, async_save=tc.async_checkpoint)
    tmp_moved = clean_for_resume(workdir) if is_main else []
    summary: dict = {}
    state, meta, restored = _start(cfg, workdir, fns, quiet, summary)
    mngr.reload()  # it may have listed steps that were moved aside
    start = int(state.step)
    summary.update({"start_step": start, "tmp_moved_aside": len(tmp_moved)})
    end = tc.steps if stop_after is None else min(tc.steps, stop_after)
    ledger = H.Ledger(1, [int(meta.get("skipped_steps", 0))], start if restored else None)
    eval_batches = [shd.global_batch(b, mesh) for b in dataset.eval_batches(tc.eval_batches)]
    hooks, ev = _hooks(cfg, workdir, fns, mngr, ledger, eval_batches, quiet=quiet,
                       tensorboard=tensorboard)
    schedule = Schedule(frozenset(ckpt.checkpoint_steps(tc)), tc.eval_every, tc.steps,
                        at_start=not restored)
    run_loop(state, fns.step, lambda i: shd.global_batch(dataset.train_batch(i), mesh), start,
             end, hooks, schedule)
  summary.update(ev.last[0] if ev.last[0].get("step", 0) > 0 else {})
  summary.update({"step": end, "workdir": str(workdir), "skipped_steps": ledger.skipped[0],
                  "n_params": fns.model.param_count(fns.abstract)})
  return summary_from_metrics(workdir, summary)


def train_once(cfg: Config, workdir, *, dataset=None, quiet: bool = True) -> dict:
  """Train (or resume) a run unless it is finished (``sbjax.train.done``); returns its
  summary. A run that stops short of ``train.steps`` raises."""
  done = finished(workdir)
  if done is not None:
    return done
  summary = train(cfg, workdir, dataset=dataset, quiet=quiet)
  if summary.get("step") != cfg.train.steps or "eval_loss" not in summary:
    raise RuntimeError(f"run {workdir} stopped at step {summary.get('step')} of {cfg.train.steps}")
  return mark_finished(workdir, summary, cfg.to_dict())
