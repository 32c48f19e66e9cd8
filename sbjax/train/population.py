"""Population training: N models that differ in seed (and optionally learning rate),
trained in ONE jitted step vmapped over a leading member axis: a composition of
``sbjax.train.loop.run_loop`` and its hooks, as ``sbjax.train.train``.

    from sbjax.train.population import train_population
    train_population(cfg, "runs/pop", seeds=[0, 1, 2])            # 3 seeds
    train_population(cfg, "runs/pop", lrs=[1e-3, 3e-3])           # seeds cfg.train.seed + i

Command line: ``python -m experiments.train --config=tiny --workdir=W --population=3
[--population_lrs=1e-3,3e-3,1e-2] [--population_seeds=0,1,2]``.

Layout: ``W/member_<i>/`` is a normal sbjax workdir per member (its own config.json
with that member's ``train.seed``/``train.lr``, metrics.jsonl and orbax checkpoints),
readable by ``sbjax.checkpoint.load_params`` and resumable by ``sbjax.train.train`` as a
single run; ``W/population.json`` lists the members. Data: all members see the same
batches (``train.data_seed`` is shared); the batch is not replicated per member.

Equality with separate runs: the step is ``sbjax.train.make_train_step`` vmapped over
the member axis (params, optimizer state) with the batch broadcast, and members are
initialised with ``Model.init`` vmapped over their keys. With equal learning rates a
member's losses and parameters equal the separate run's up to float32 reassociation
of the batched matmuls (tests: within 1e-5 absolute after 3 steps; bitwise on the
machines tried). A per-member learning rate is implemented by scaling the update of
the shared optimizer (built with ``train.lr``) by ``lr_i / train.lr``; the schedule,
weight decay and clipping are all linear in the peak lr, so this is the separate run's
update up to a rounding of ~1 ulp per step (tests: within 1e-5). Members whose lr
equals ``train.lr`` are not scaled at all.

Sharding: parameters and optimizer state carry ``sbjax.sharding`` specs with a
leading unsharded member axis (``leading=1``); the batch shards over data×fsdp as in
a single run. Resume: rerunning restores every member at the newest step that all
members have checkpointed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax import checkpoint as ckpt
from sbjax import sharding as shd
from sbjax.config import Config
from sbjax.model import Model
from sbjax.optim import gamma_fn, lr_schedule, make_optimizer
from sbjax.train import hooks as H
from sbjax.train.loop import Schedule, run_loop
from sbjax.train.objective import loss_fn
from sbjax.train.single import make_dataset_for
from sbjax.train.step import (TrainState, evaluate_members, make_eval_step, make_train_step,
                              members_finite, state_step)
from sbjax.train.workdir import (clean_for_resume, prepare_workdir, resolve_vocab,
                                 summary_from_metrics)

log = logging.getLogger("sbjax")


def member_dir(workdir, i: int) -> Path:
  return Path(workdir) / f"member_{i}"


def member_configs(cfg: Config, n: int | None = None, seeds=None, lrs=None) -> list[Config]:
  """The members' configs: seeds default to ``train.seed + i``, lrs to ``train.lr``."""
  sizes = {len(x) for x in (seeds, lrs) if x is not None}
  if n is not None and n > 0:
    sizes.add(n)
  if len(sizes) != 1:
    raise ValueError(f"population size is ambiguous: population={n}, "
                     f"seeds={list(seeds) if seeds is not None else None}, "
                     f"lrs={list(lrs) if lrs is not None else None}; give N and/or lists of "
                     "length N")
  (n,) = sizes
  if n < 1:
    raise ValueError(f"population size must be >= 1, got {n}")
  seeds = list(seeds) if seeds is not None else [cfg.train.seed + i for i in range(n)]
  lrs = list(lrs) if lrs is not None else [cfg.train.lr] * n
  out = []
  for s, lr in zip(seeds, lrs):
    tc = dataclasses.replace(cfg.train, seed=int(s), lr=float(lr))  # validates lr > 0
    out.append(cfg.replace(train=tc))
  return out


def _stack(trees):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _scaled_tx(tx, scale):
  """``tx`` with its updates multiplied by ``scale`` (same state structure as ``tx``)."""

  def update(grads, state, params=None):
    updates, state = tx.update(grads, state, params)
    return jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates), state

  return optax.GradientTransformation(tx.init, update)


def make_population_step(model: Model, tx, tc, scaled: bool, nan_at_step: int = -1,
                         loss=None):
  """(params_N, opt_N, batch, step, scale_N) -> (params_N, opt_N, metrics_N):
  ``sbjax.train.make_train_step`` vmapped over the member axis, batch shared (``loss``: as
  there)."""

  def member_step(params, opt_state, batch, step_idx, scale):
    tx_m = _scaled_tx(tx, scale) if scaled else tx
    step = make_train_step(model, tx_m, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                           nan_at_step=nan_at_step, loss=loss)
    return step(params, opt_state, batch, step_idx)

  return jax.vmap(member_step, in_axes=(0, 0, None, None, 0))


def _restore_members(dirs, abstract_params, abstract_opt):
  """(step, [params], [opt], [meta]) at the newest step all members hold, or None."""
  steps = [set(ckpt.list_steps(d)) for d in dirs]
  if not any(steps):
    return None
  common = set.intersection(*steps)
  for step in sorted(common, reverse=True):
    try:
      outs = [ckpt.restore(d, step, abstract_params, abstract_opt) for d in dirs]
    except Exception as e:  # noqa: BLE001 - try an older common step
      log.warning("population: step %d not restorable in every member (%s: %s); trying older",
                  step, type(e).__name__, str(e)[:200])
      continue
    if any(o[1] is None for o in outs):
      raise ValueError(f"population step {step} holds parameters only in some member")
    return step, [o[0] for o in outs], [o[1] for o in outs], [o[2] for o in outs]
  raise ValueError(f"the population members in {Path(dirs[0]).parent} share no restorable "
                   f"checkpoint step (steps per member: {[sorted(s) for s in steps]}); "
                   "use a new --workdir")


def _prepare(cfg: Config, workdir: Path, members, dirs, is_main: bool) -> None:
  for d, mcfg in zip(dirs, members):
    prepare_workdir(d, mcfg, is_main)
  if is_main:
    (workdir / "population.json").write_text(json.dumps(
        {"members": [{"dir": d.name, "seed": m.train.seed, "lr": m.train.lr}
                     for d, m in zip(dirs, members)]}, indent=2))


def _build(cfg: Config, mesh, members, nan_at_step: int) -> types.SimpleNamespace:
  """Model, stacked shardings and jitted functions of a population (under ``set_mesh``)."""
  tc, mc, n = cfg.train, cfg.model, len(members)
  model = Model(mc)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, mc, abstract)  # shared; per-member lr by update scaling
  abstract_opt = jax.eval_shape(tx.init, abstract)
  stacked = lambda t: jax.tree.map(  # noqa: E731
      lambda x: jax.ShapeDtypeStruct((n,) + x.shape, x.dtype), t)
  p_sh = shd.tree_shardings(stacked(abstract), mesh, leading=1)
  o_sh = shd.tree_shardings(stacked(abstract_opt), mesh, leading=1)
  p_sh1, o_sh1 = shd.tree_shardings(abstract, mesh), shd.tree_shardings(abstract_opt, mesh)
  batch_sh, repl = shd.batch_sharding(mesh), shd.replicated(mesh)
  scales = np.asarray([m.train.lr / tc.lr for m in members], np.float32)
  state_sh = TrainState(repl, p_sh, o_sh)
  step = jax.jit(state_step(make_population_step(model, tx, tc, bool(np.any(scales != 1.0)),
                                                 nan_at_step, loss_fn(cfg, model))),
                 in_shardings=(state_sh, batch_sh, repl), out_shardings=(state_sh, repl),
                 donate_argnums=(0,))
  scales_dev = jax.device_put(scales, repl)
  return types.SimpleNamespace(
      model=model, abstract=abstract, abstract_opt=abstract_opt, p_sh=p_sh, o_sh=o_sh,
      p_sh1=p_sh1, o_sh1=o_sh1, repl=repl,
      init=jax.jit(jax.vmap(lambda k: model.init(k, 1, tc.seq_len)), out_shardings=p_sh),
      opt_init=jax.jit(jax.vmap(tx.init), out_shardings=o_sh),
      step=lambda state, batch: step(state, batch, scales_dev),
      eval=jax.jit(jax.vmap(make_eval_step(model), in_axes=(0, None)),
                   in_shardings=(p_sh, batch_sh), out_shardings=repl),
      take=jax.jit(lambda p, o, i: jax.tree.map(lambda x: x[i], (p, o)),
                   out_shardings=(p_sh1, o_sh1)),
      finite=members_finite(n),
      lrs=[jax.jit(lr_schedule(m.train)) for m in members])  # as train() logs it


def _start(members, dirs, fns, quiet: bool, workdir: Path):
  """(TrainState, skipped per member, restored?) at the newest common step, or fresh."""
  restored = _restore_members(dirs, ckpt.abstract_with_shardings(fns.abstract, fns.p_sh1),
                              ckpt.abstract_with_shardings(fns.abstract_opt, fns.o_sh1))
  if restored is None:
    keys = jax.vmap(jax.random.key)(jnp.asarray([m.train.seed for m in members], jnp.uint32))
    params = fns.init(keys)
    state = TrainState(jax.device_put(np.int32(0), fns.repl), params, fns.opt_init(params))
    return state, [0] * len(members), False
  start, ps, os_, metas = restored
  if not quiet:
    log.info("resuming population %s (%d members) from step %d", workdir, len(members), start)
  state = TrainState(jax.device_put(np.int32(start), fns.repl),
                     jax.device_put(_stack(ps), fns.p_sh), jax.device_put(_stack(os_), fns.o_sh))
  return state, [int(m.get("skipped_steps", 0)) for m in metas], True


def _hooks(cfg, members, dirs, fns, mngrs, ledger, eval_batches, name: str, quiet: bool,
           tensorboard: bool):
  tc, n = cfg.train, len(members)
  records = H.Records(dirs, enabled=jax.process_index() == 0, tensorboard=tensorboard)

  def stop(j, i, m):
    return (f"member {j} (seed {members[j].train.seed}, lr {members[j].train.lr}): non-finite "
            f"loss or gradient (loss={float(m['loss'])}) at step {i}; training stopped. The last "
            f"good checkpoint is step {ledger.last_saved[j]} in {dirs[j]}.")

  def meta(j, step):
    return {"step": step, "data_position": step, "data_seed": tc.data_seed,
            "seed": members[j].train.seed, "skipped_steps": ledger.skipped[j]}

  def split(state):
    return (fns.take(state.params, state.opt_state, np.int32(j)) for j in range(n))

  tokens = tc.batch_size * tc.seq_len
  hooks = [H.NanPolicy(tc.skip_nonfinite_steps, ledger, stop, prefix=lambda j: f"member {j}: "),
           H.TrainLog(records, tc.log_every, fns.lrs, tokens,
                      [gamma_fn(m.train) for m in members])]
  if not quiet and records.enabled:  # process 0
    hooks.append(H.Progress(name, tc.steps, tc.log_every, tokens_per_step=tokens * n))
  ev = H.Evaluate(lambda p: evaluate_members(fns.eval, p, eval_batches), records, n)
  hooks += [ev, H.Checkpoint(mngrs, ledger, fns.finite, split, meta, members=True), records]
  return hooks, ev


def train_population(cfg: Config, workdir, *, n: int | None = None, seeds=None, lrs=None,
                     dataset=None, stop_after: int | None = None, mesh=None,
                     quiet: bool = False, tensorboard: bool = True,
                     nan_at_step: int = -1) -> list[dict]:
  """Train (or resume) a population in ``workdir``; one summary dict per member.
  ``nan_at_step`` is the test hook of ``sbjax.train.train``."""
  workdir = Path(workdir)
  is_main = jax.process_index() == 0
  tc = cfg.train
  if tc.freeze_trunk or tc.init_from:
    raise ValueError("population mode does not support train.freeze_trunk / train.init_from; "
                     "train the members as separate runs")
  dataset = dataset if dataset is not None else make_dataset_for(cfg, workdir)
  cfg = resolve_vocab(cfg, dataset.vocab_size)
  members = member_configs(cfg, n, seeds, lrs)
  n = len(members)
  dirs = [member_dir(workdir, i) for i in range(n)]
  _prepare(cfg, workdir, members, dirs, is_main)
  mesh = mesh if mesh is not None else shd.make_mesh(cfg.mesh)
  shd.check_divisible(cfg.model, mesh, tc.batch_size, tc.grad_accum)
  with jax.set_mesh(mesh):
    fns = _build(cfg, mesh, members, nan_at_step)
    mngrs = [ckpt.make_manager(d, m.train, async_save=tc.async_checkpoint)
             for d, m in zip(dirs, members)]
    if is_main:
      for d in dirs:
        clean_for_resume(d, prefix=f"{d.name}/")
    state, skipped, restored = _start(members, dirs, fns, quiet, workdir)
    for mg in mngrs:
      mg.reload()
    start = int(state.step)
    end = tc.steps if stop_after is None else min(tc.steps, stop_after)
    ledger = H.Ledger(n, skipped, start if restored else None)
    eval_batches = [shd.global_batch(b, mesh) for b in dataset.eval_batches(tc.eval_batches)]
    hooks, ev = _hooks(cfg, members, dirs, fns, mngrs, ledger, eval_batches,
                       f"{workdir.name} x{n}", quiet, tensorboard)
    schedule = Schedule(frozenset(ckpt.checkpoint_steps(tc)), tc.eval_every, tc.steps,
                        at_start=not restored)
    run_loop(state, fns.step, lambda i: shd.global_batch(dataset.train_batch(i), mesh), start,
             end, hooks, schedule)
  n_params = fns.model.param_count(fns.abstract)
  out = []
  for j, d in enumerate(dirs):
    s = {"start_step": start, **(ev.last[j] if ev.last[j].get("step", 0) > 0 else {}),
         "step": end, "workdir": str(d), "skipped_steps": ledger.skipped[j],
         "n_params": n_params, "seed": members[j].train.seed, "lr": members[j].train.lr}
    out.append(summary_from_metrics(d, s))
  return out
