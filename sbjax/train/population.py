"""Population training: N models that differ in seed (and optionally learning rate),
trained in ONE jitted step vmapped over a leading member axis.

    from sbjax.population import train_population
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
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax import checkpoint as ckpt
from sbjax import sharding as shd
from sbjax import train as train_lib
from sbjax.config import Config
from sbjax.model import Model
from sbjax.optim import lr_schedule, make_optimizer

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


def make_population_step(model: Model, tx, tc, scaled: bool):
  """(params_N, opt_N, batch, step, scale_N) -> (params_N, opt_N, metrics_N):
  ``sbjax.train.make_train_step`` vmapped over the member axis, batch shared."""

  def member_step(params, opt_state, batch, step_idx, scale):
    tx_m = _scaled_tx(tx, scale) if scaled else tx
    step = train_lib.make_train_step(model, tx_m, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                                     tc.nan_at_step)
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


def train_population(cfg: Config, workdir, *, n: int | None = None, seeds=None, lrs=None,
                     dataset=None, stop_after: int | None = None, mesh=None,
                     quiet: bool = False) -> list[dict]:
  """Train (or resume) a population in ``workdir``; one summary dict per member."""
  from sbjax.data import make_dataset  # noqa: PLC0415 - as in sbjax.train

  workdir = Path(workdir)
  is_main = jax.process_index() == 0
  tc = cfg.train
  if tc.freeze_trunk or tc.init_from:
    raise ValueError("population mode does not support train.freeze_trunk / train.init_from; "
                     "train the members as separate runs")
  if dataset is None:
    dataset = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                           seed=tc.data_seed, workdir=str(workdir))
  cfg = train_lib.resolve_vocab(cfg, dataset.vocab_size)
  members = member_configs(cfg, n, seeds, lrs)
  n = len(members)
  dirs = [member_dir(workdir, i) for i in range(n)]
  mc = cfg.model
  for d, mcfg in zip(dirs, members):
    d.mkdir(parents=True, exist_ok=True)
    train_lib.check_workdir_config(d, mcfg)
    if is_main and not (d / "config.json").exists():
      tmp = d / "config.json.tmp"
      tmp.write_text(json.dumps(mcfg.to_dict(), indent=2))
      tmp.replace(d / "config.json")
  if is_main:
    (workdir / "population.json").write_text(json.dumps(
        {"members": [{"dir": d.name, "seed": m.train.seed, "lr": m.train.lr}
                     for d, m in zip(dirs, members)]}, indent=2))

  mesh = mesh if mesh is not None else shd.make_mesh(cfg.mesh)
  shd.check_divisible(mc, mesh, tc.batch_size, tc.grad_accum)
  model = Model(mc)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, mc, abstract)  # shared; per-member lr by update scaling
  abstract_opt = jax.eval_shape(tx.init, abstract)
  p_sh1, o_sh1 = shd.tree_shardings(abstract, mesh), shd.tree_shardings(abstract_opt, mesh)
  stacked = lambda t: jax.tree.map(  # noqa: E731
      lambda x: jax.ShapeDtypeStruct((n,) + x.shape, x.dtype), t)
  p_sh = shd.tree_shardings(stacked(abstract), mesh, leading=1)
  o_sh = shd.tree_shardings(stacked(abstract_opt), mesh, leading=1)
  batch_sh, repl = shd.batch_sharding(mesh), shd.replicated(mesh)
  scales = np.asarray([m.train.lr / tc.lr for m in members], np.float32)
  scaled = bool(np.any(scales != 1.0))
  schedules = [jax.jit(lr_schedule(m.train)) for m in members]  # as train() logs it

  with jax.set_mesh(mesh):
    init_fn = jax.jit(jax.vmap(lambda k: model.init(k, 1, tc.seq_len)), out_shardings=p_sh)
    opt_init = jax.jit(jax.vmap(tx.init), out_shardings=o_sh)
    step_fn = jax.jit(make_population_step(model, tx, tc, scaled),
                      in_shardings=(p_sh, o_sh, batch_sh, repl, repl),
                      out_shardings=(p_sh, o_sh, repl), donate_argnums=(0, 1))
    eval_fn = jax.jit(jax.vmap(train_lib.make_eval_step(model), in_axes=(0, None)),
                      in_shardings=(p_sh, batch_sh), out_shardings=repl)
    take = jax.jit(lambda p, o, i: jax.tree.map(lambda x: x[i], (p, o)),
                   out_shardings=(p_sh1, o_sh1))
    all_finite = jax.jit(lambda t: jnp.stack(  # per member: (N,) bool
        [jnp.all(jnp.isfinite(x.reshape(n, -1)), axis=1) for x in jax.tree.leaves(t)]).all(0))

    mngrs = [ckpt.make_manager(d, m.train, async_save=tc.async_checkpoint)
             for d, m in zip(dirs, members)]
    if is_main:
      for d in dirs:
        for name in ckpt.cleanup_tmp(d):
          log.warning("moved aside an unfinished checkpoint save: %s/%s", d.name, name)
        train_lib.repair_jsonl(d / "metrics.jsonl")  # a line cut by a kill, as in sbjax.train
    restored = _restore_members(dirs, ckpt.abstract_with_shardings(abstract, p_sh1),
                                ckpt.abstract_with_shardings(abstract_opt, o_sh1))
    if restored is not None:
      start, ps, os_, metas = restored
      for mg in mngrs:
        mg.reload()
      params = jax.device_put(_stack(ps), p_sh)
      opt_state = jax.device_put(_stack(os_), o_sh)
      skipped = [int(m.get("skipped_steps", 0)) for m in metas]
      if not quiet:
        log.info("resuming population %s (%d members) from step %d", workdir, n, start)
    else:
      start = 0
      keys = jax.vmap(jax.random.key)(jnp.asarray([m.train.seed for m in members], jnp.uint32))
      params = init_fn(keys)
      opt_state = opt_init(params)
      skipped = [0] * n

    eval_batches = [shd.global_batch(b, mesh) for b in dataset.eval_batches(tc.eval_batches)]
    tokens_per_step = tc.batch_size * tc.seq_len
    end = tc.steps if stop_after is None else min(tc.steps, stop_after)
    ckpt_steps = set(ckpt.checkpoint_steps(tc))
    last_saved = [start if restored is not None else None] * n

    def evaluate(params):
      outs = [eval_fn(params, b) for b in eval_batches]
      loss = np.mean([np.asarray(o["loss"], np.float64) for o in outs], axis=0)
      acc = np.mean([np.asarray(o["acc"], np.float64) for o in outs], axis=0)
      return [{"eval_loss": float(loss[i]), "eval_acc": float(acc[i])} for i in range(n)]

    def save_at(step, params, opt_state):
      if step not in ckpt_steps:
        return
      finite = np.asarray(all_finite(params))
      bad = [i for i in range(n) if not finite[i]]
      if bad:
        raise train_lib.NonFiniteLossError(
            f"parameters of members {bad} became non-finite before step {step}; not saving. "
            f"Last good checkpoints: {[last_saved[i] for i in bad]}.")
      for i, m in enumerate(members):
        p_i, o_i = take(params, opt_state, np.int32(i))
        meta = {"step": step, "data_position": step, "data_seed": tc.data_seed,
                "seed": m.train.seed, "skipped_steps": skipped[i]}
        ckpt.save(mngrs[i], step, p_i, o_i, meta)
        last_saved[i] = step

    summaries = [{"start_step": start} for _ in range(n)]
    # As in sbjax.train: an eval record is written before the checkpoint of the same step, so
    # a run killed in between redoes both instead of resuming past an unlogged eval.
    if restored is None:
      recs = evaluate(params)  # a collective: every process runs it, process 0 writes
      if is_main:
        for i, rec in enumerate(recs):
          train_lib._append_jsonl(dirs[i] / "metrics.jsonl", {"step": 0, **rec})  # noqa: SLF001
      save_at(0, params, opt_state)

    t_last, tok_last, t0 = time.perf_counter(), 0, time.perf_counter()

    def drain(pending):
      nonlocal t_last, tok_last
      i, m = pending
      loss, ok = np.asarray(m["loss"]), np.asarray(m["ok"])
      acc, gnorm = np.asarray(m["acc"]), np.asarray(m["grad_norm"])
      for j in range(n):
        if not ok[j] or not math.isfinite(float(loss[j])):
          if tc.skip_nonfinite_steps > 0 and skipped[j] < tc.skip_nonfinite_steps:
            skipped[j] += 1
            log.warning("member %d: non-finite loss or update at step %d: skipped (%d/%d)", j, i,
                        skipped[j], tc.skip_nonfinite_steps)
            continue
          raise train_lib.NonFiniteLossError(
              f"member {j} (seed {members[j].train.seed}, lr {members[j].train.lr}): non-finite "
              f"loss or gradient (loss={float(loss[j])}) at step {i}; training stopped. The last "
              f"good checkpoint is step {last_saved[j]} in {dirs[j]}.")
      tok_last += tokens_per_step
      if is_main and (i % tc.log_every == 0 or i == end - 1):
        now = time.perf_counter()
        tps = tok_last * n / max(now - t_last, 1e-9)
        t_last, tok_last = now, 0
        for j in range(n):
          rec = {"step": i, "loss": float(loss[j]), "acc": float(acc[j]),
                 "grad_norm": float(gnorm[j]), "lr": float(schedules[j](i)),
                 "tokens_per_sec": tps / n}
          train_lib._append_jsonl(dirs[j] / "metrics.jsonl", rec)  # noqa: SLF001
        if not quiet:
          eta = (now - t0) / max(i + 1 - start, 1) * (end - i - 1)
          sys.stderr.write(f"\r[{workdir.name} x{n}] step {i + 1}/{tc.steps} loss "
                           f"{float(loss.mean()):.4f} (mean) {tps:,.0f} tok/s ETA "
                           f"{train_lib._fmt_time(eta)}   ")  # noqa: SLF001
          sys.stderr.flush()

    scales_dev = jax.device_put(scales, repl)
    state = [params, opt_state]

    def run_step(batch, i):
      state[0], state[1], m = step_fn(state[0], state[1], batch, np.int32(i), scales_dev)
      return m

    def at_boundary(s, do_eval):
      if do_eval:
        for j, rec in enumerate(evaluate(state[0])):  # collective, as above
          if is_main:
            train_lib._append_jsonl(dirs[j] / "metrics.jsonl", {"step": s, **rec})  # noqa: SLF001
          summaries[j].update({"step": s, **rec})
      save_at(s, *state)

    train_lib.step_loop(dataset, mesh, tc, start, end, run_step, drain, at_boundary)
    for mg in mngrs:
      mg.wait_until_finished()
      mg.close()
  if not quiet:
    sys.stderr.write("\n")
  n_params = model.param_count(abstract)
  for j, d in enumerate(dirs):
    summaries[j].update({"step": end, "workdir": str(d), "skipped_steps": skipped[j],
                         "n_params": n_params, "seed": members[j].train.seed,
                         "lr": members[j].train.lr})
    train_lib.summary_from_metrics(d, summaries[j])
  return summaries
