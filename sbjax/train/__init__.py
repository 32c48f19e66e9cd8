"""The training loop: sharded jit step, evaluation, logs, checkpoints, resume.

``train(cfg, workdir)`` runs (or continues) one run. Rerunning it on an existing
workdir resumes from the newest restorable checkpoint; since batch i is a pure
function of (data_seed, i), the continued run's losses equal those of an
uninterrupted run bit for bit on CPU.

Host syncs: the step is dispatched asynchronously and its loss is read one step
late (so the device is never idle waiting for Python), except at checkpoint steps,
where the parameters are checked to be finite before they are saved.
"""

from __future__ import annotations

import dataclasses
import functools
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
from sbjax.config import Config
from sbjax.model import Model
from sbjax.optim import lr_schedule, make_optimizer
from sbjax.train.done import finished, mark_finished

log = logging.getLogger("sbjax")

# Keys that may differ between a workdir's saved config and a resuming command.
RESUME_MUTABLE = {
    "train": {"steps", "lr", "warmup_steps", "min_lr_ratio", "b1", "b2", "eps", "weight_decay",
              "clip", "eval_every", "eval_batches", "log_every", "async_checkpoint",
              "skip_nonfinite_steps", "nan_at_step", "keep_every_n"},
    "mesh": {"data", "fsdp", "tensor"},
    # same loss and gradients (kernels, not values); absent from older config.json files
    "model": {"loss_chunk", "attn_impl"},
    "name": None,
}


class NonFiniteLossError(RuntimeError):
  pass


class ConfigMismatchError(ValueError):
  pass


def config_diff(saved: dict, new: dict) -> tuple[list[str], list[str]]:
  """(refused, allowed) differences between a saved and a new config dict."""
  refused, allowed = [], []
  for section in sorted(set(saved) | set(new)):
    a, b = saved.get(section), new.get(section)
    if isinstance(a, dict) or isinstance(b, dict):
      a, b = a or {}, b or {}
      for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
          line = f"{section}.{k}: saved {a.get(k)!r} -> now {b.get(k)!r}"
          ok = section in RESUME_MUTABLE and k in (RESUME_MUTABLE[section] or ())
          (allowed if ok else refused).append(line)
    elif a != b:
      line = f"{section}: saved {a!r} -> now {b!r}"
      (allowed if section in RESUME_MUTABLE else refused).append(line)
  return refused, allowed


def check_workdir_config(workdir: Path, cfg: Config) -> None:
  path = workdir / "config.json"
  if not path.exists():
    if ckpt.list_steps(workdir):
      raise ConfigMismatchError(f"{workdir} holds checkpoints but no config.json; "
                                "refusing to resume into an unknown run; use a new --workdir")
    return
  saved = json.loads(path.read_text())
  try:  # a field added to sbjax after the run started takes its default, so it is no difference
    saved = Config.from_dict(saved).to_dict()
  except (TypeError, ValueError, KeyError):
    pass  # compare the raw dicts: the diff names what differs
  refused, allowed = config_diff(saved, cfg.to_dict())
  if refused:
    raise ConfigMismatchError(
        f"{workdir} holds a run with a different configuration; refusing to resume. "
        "Differences:\n  " + "\n  ".join(refused) + "\nUse a new --workdir, or the saved config.")
  for line in allowed:
    log.warning("resuming with a changed setting: %s", line)


def _all_finite(tree) -> jax.Array:
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


_all_finite_jit = jax.jit(_all_finite)


def make_train_step(model: Model, tx, grad_accum: int, skip_nonfinite: bool,
                    nan_at_step: int = -1):
  """(params, opt_state, batch, step) -> (params, opt_state, metrics); batch is B×(T+1).

  ``nan_at_step`` is a test hook: at that step the gradients are made infinite, as a bad
  batch would. With ``skip_nonfinite`` a step whose loss, gradient or update is not finite
  leaves params and optimizer state unchanged (``metrics["ok"]`` is False).
  """

  def loss_and_grad(params, batch):
    (loss, aux), grads = jax.value_and_grad(model.loss, has_aux=True)(params, batch)
    return loss, aux, grads

  def step(params, opt_state, batch, step_idx=0):
    if grad_accum == 1:
      loss, aux, grads = loss_and_grad(params, batch)
    else:
      micro = batch.reshape(grad_accum, batch.shape[0] // grad_accum, batch.shape[1])

      def body(carry, mb):
        g_acc, l_acc, a_acc = carry
        loss, aux, g = loss_and_grad(params, mb)
        g_acc = jax.tree.map(lambda x, y: x + y.astype(jnp.float32), g_acc, g)
        return (g_acc, l_acc + loss, a_acc + aux["acc"]), None

      zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
      (g_sum, l_sum, a_sum), _ = jax.lax.scan(body, (zeros, 0.0, 0.0), micro)
      grads = jax.tree.map(lambda g, p: (g / grad_accum).astype(p.dtype), g_sum, params)
      loss, aux = l_sum / grad_accum, {"acc": a_sum / grad_accum}
    if nan_at_step >= 0:
      bad = jnp.asarray(step_idx) == nan_at_step
      grads = jax.tree.map(lambda g: jnp.where(bad, jnp.inf, 1.0).astype(g.dtype) * g, grads)
    updates, new_opt = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    gnorm = optax.tree.norm(grads)
    ok = jnp.isfinite(loss) & jnp.isfinite(gnorm)
    if skip_nonfinite:
      ok = ok & _all_finite(new_params)
      new_params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
      new_opt = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_opt, opt_state)
    return new_params, new_opt, {"loss": loss, "acc": aux["acc"], "grad_norm": gnorm, "ok": ok}

  return step


def make_eval_step(model: Model):
  def step(params, batch):
    _, aux = model.loss(params, batch)
    return aux

  return step


def evaluate(eval_fn, params, batches) -> dict:
  outs = [eval_fn(params, b) for b in batches]
  return {"eval_loss": float(np.mean([float(o["loss"]) for o in outs])),
          "eval_acc": float(np.mean([float(o["acc"]) for o in outs]))}


def _fmt_time(s: float) -> str:
  s = int(max(s, 0))
  return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _append_jsonl(path: Path, rec: dict) -> None:
  with open(path, "a") as f:
    f.write(json.dumps(rec) + "\n")


def repair_jsonl(path: Path) -> int:
  """Cut a partial last line (a write killed mid-line) off a JSONL log so that appended
  records start on a fresh line; returns the number of bytes removed (logged)."""
  path = Path(path)
  if not path.is_file():
    return 0
  data = path.read_bytes()
  if not data or data.endswith(b"\n"):
    return 0
  keep = data.rfind(b"\n") + 1
  with open(path, "r+b") as f:
    f.truncate(keep)
  log.warning("%s ended in a partial line (%d bytes, from an interrupted write); removed it",
              path, len(data) - keep)
  return len(data) - keep


def read_metrics(workdir) -> list[dict]:
  """metrics.jsonl records, deduplicated by step (a resumed run's later record wins).
  Lines that are not valid JSON (a write cut off by a kill) are skipped with a warning."""
  path = Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  by_step: dict[int, dict] = {}
  for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
    if line.strip():
      try:
        rec = json.loads(line)
        step = int(rec["step"])
      except (ValueError, KeyError, TypeError):
        log.warning("%s line %d is not a metrics record (interrupted write?); skipped", path, n)
        continue
      by_step.setdefault(step, {}).update(rec)
  return [by_step[s] for s in sorted(by_step)]


def resolve_vocab(cfg: Config, data_vocab: int) -> Config:
  """Fill model.vocab_size from the data when it is 0; refuse a mismatch."""
  mc = cfg.model
  if mc.vocab_size == 0:
    return cfg.replace(model=dataclasses.replace(mc, vocab_size=data_vocab))
  if mc.vocab_size < data_vocab:
    raise ValueError(f"model.vocab_size={mc.vocab_size} is smaller than the data's vocabulary "
                     f"({data_vocab} tokens); set --config.model.vocab_size={data_vocab} or 0")
  if mc.vocab_size > data_vocab:
    log.warning("model.vocab_size=%d is larger than the data's vocabulary (%d tokens); the "
                "extra rows are padding (as Pythia's 50304 for a 50277-piece tokenizer)",
                mc.vocab_size, data_vocab)
  return cfg


def init_trunk_from(cfg: Config, params, mesh_shardings):
  """Frozen-trunk mode: copy every non-head parameter from train.init_from."""
  src_cfg, src, src_step = ckpt.load_params(
      cfg.train.init_from, None if cfg.train.init_step < 0 else cfg.train.init_step)
  head_key = "embed" if cfg.model.head == "tied" else "head"
  out = dict(params)
  for k, v in src.items():
    if k == "head" or (k == head_key and cfg.model.head == "tied"):
      continue
    if k not in out:
      raise ValueError(f"train.init_from={cfg.train.init_from}: parameter {k!r} is not in this model")
    if jax.tree.map(lambda x: x.shape, v) != jax.tree.map(lambda x: x.shape, out[k]):
      raise ValueError(f"train.init_from={cfg.train.init_from}: parameter {k!r} has another shape; "
                       "the trunk config must match the source run's model")
    out[k] = v
  log.info("initialised the trunk from %s step %d", cfg.train.init_from, src_step)
  return jax.device_put(out, mesh_shardings)


def step_loop(dataset, mesh, tc, start: int, end: int, run_step, drain, at_boundary):
  """The step loop shared by :func:`train` and ``sbjax.population``.

  ``run_step(batch, i)`` runs step ``i`` and returns its device metrics; they are read one
  step late by ``drain((i, metrics))``, so the host never waits on the device except at a
  boundary: after a step ``s`` that is checkpointed, evaluated or the last one, the metrics
  are drained and ``at_boundary(s, evaluate)`` runs, with ``evaluate`` true at an eval step
  (every ``tc.eval_every`` and the final ``tc.steps``); it evaluates (then) and saves.
  """
  ckpt_steps = set(ckpt.checkpoint_steps(tc))
  pending = None
  for i in range(start, end):
    batch = shd.global_batch(dataset.train_batch(i), mesh)
    m = run_step(batch, i)
    if pending is not None:
      drain(pending)
    pending = (i, m)
    s = i + 1
    if s in ckpt_steps or s % tc.eval_every == 0 or s == end:
      drain(pending)
      pending = None
      at_boundary(s, s % tc.eval_every == 0 or s == tc.steps)
  if pending is not None:
    drain(pending)


def summary_from_metrics(workdir, summary: dict) -> dict:
  """Add the last logged train loss and eval record of ``workdir`` to ``summary``."""
  recs = read_metrics(workdir)
  losses = [r["loss"] for r in recs if "loss" in r]
  if losses:
    summary["loss"] = losses[-1]
  evals = [r for r in recs if "eval_loss" in r]
  if evals:
    summary["eval_loss"] = evals[-1]["eval_loss"]
    summary["eval_acc"] = evals[-1]["eval_acc"]
  return summary


def train(cfg: Config, workdir, *, dataset=None, stop_after: int | None = None,
          mesh=None, quiet: bool = False) -> dict:
  """Train (or resume) a run in ``workdir``. ``stop_after`` stops early at that step
  (used by tests to simulate an interruption). Returns a summary dict."""
  from sbjax.data import make_dataset  # data is upstream of train; imported lazily for start-up

  workdir = Path(workdir)
  is_main = jax.process_index() == 0
  tc = cfg.train
  if dataset is None:
    dataset = make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                           seed=tc.data_seed, workdir=str(workdir))
  cfg = resolve_vocab(cfg, dataset.vocab_size)
  mc = cfg.model
  try:
    workdir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise OSError(f"cannot create the workdir {workdir}: {e.strerror}; choose a writable --workdir") from None
  check_workdir_config(workdir, cfg)
  if is_main and not (workdir / "config.json").exists():
    tmp = workdir / "config.json.tmp"
    tmp.write_text(json.dumps(cfg.to_dict(), indent=2))
    tmp.replace(workdir / "config.json")

  mesh = mesh if mesh is not None else shd.make_mesh(cfg.mesh)
  shd.check_divisible(mc, mesh, tc.batch_size, tc.grad_accum)
  model = Model(mc)
  abstract_params = model.abstract_params(tc.seq_len)
  param_sh = shd.tree_shardings(abstract_params, mesh)
  tx = make_optimizer(tc, mc, abstract_params)
  abstract_opt = jax.eval_shape(tx.init, abstract_params)
  opt_sh = shd.tree_shardings(abstract_opt, mesh)
  batch_sh = shd.batch_sharding(mesh)
  repl = shd.replicated(mesh)

  with jax.set_mesh(mesh):
    init_fn = jax.jit(lambda k: model.init(k, 1, tc.seq_len), out_shardings=param_sh)
    opt_init = jax.jit(tx.init, out_shardings=opt_sh)
    step_fn = jax.jit(make_train_step(model, tx, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                                      tc.nan_at_step),
                      in_shardings=(param_sh, opt_sh, batch_sh, repl),
                      out_shardings=(param_sh, opt_sh, repl), donate_argnums=(0, 1))
    eval_fn = jax.jit(make_eval_step(model), in_shardings=(param_sh, batch_sh), out_shardings=repl)
    schedule = jax.jit(lr_schedule(tc))

    mngr = ckpt.make_manager(workdir, tc, async_save=tc.async_checkpoint)
    tmp_moved, bad_steps = [], []
    if is_main:
      tmp_moved = ckpt.cleanup_tmp(workdir)
      for name in tmp_moved:
        log.warning("moved aside an unfinished checkpoint save: %s", name)
      repair_jsonl(workdir / "metrics.jsonl")
    restored = None
    if ckpt.list_steps(workdir):
      restored = ckpt.restore_latest_good(
          workdir, ckpt.abstract_with_shardings(abstract_params, param_sh),
          ckpt.abstract_with_shardings(abstract_opt, opt_sh), moved=bad_steps)
      mngr.reload()
      if restored is None and not quiet:
        log.warning("no restorable checkpoint in %s (all moved aside to checkpoints_bad/); "
                    "starting from step 0", workdir)
    if restored is not None:
      start, params, opt_state, meta = restored
      if opt_state is None:
        raise ValueError(f"{workdir} step {start} holds parameters only (an import); "
                         "train from it with --config.train.init_from instead")
      if not quiet:
        log.info("resuming %s from step %d (data position %s)", workdir, start,
                 meta.get("data_position"))
    else:
      start = 0
      params = init_fn(jax.random.key(tc.seed))
      if tc.init_from:
        params = init_trunk_from(cfg, params, param_sh)
      opt_state = opt_init(params)
      meta = {}

    metrics_path = workdir / "metrics.jsonl"
    eval_batches = [shd.global_batch(b, mesh) for b in dataset.eval_batches(tc.eval_batches)]
    tokens_per_step = tc.batch_size * tc.seq_len
    end = tc.steps if stop_after is None else min(tc.steps, stop_after)
    skipped = int(meta.get("skipped_steps", 0))
    last_saved = start if restored is not None else None
    summary = {"start_step": start, "moved_aside": bad_steps, "tmp_moved_aside": len(tmp_moved)}

    def check_finite(step, params):
      if not bool(_all_finite_jit(params)):  # one compiled check, not one per leaf
        raise NonFiniteLossError(f"parameters became non-finite before step {step}; not saving. "
                                 f"The last good checkpoint is step {last_saved}.")

    def save_at(step, params, opt_state):
      nonlocal last_saved
      if step not in ckpt_steps:
        return
      check_finite(step, params)
      m = {"step": step, "data_position": step, "data_seed": tc.data_seed, "seed": tc.seed,
           "skipped_steps": skipped}
      ckpt.save(mngr, step, params, opt_state, m)
      last_saved = step

    ckpt_steps = set(ckpt.checkpoint_steps(tc))
    # At a step that is both evaluated and checkpointed, the eval record is written before
    # the checkpoint: a run killed in between then redoes both (records dedup by step),
    # instead of resuming past an eval that was never logged.
    if restored is None:
      rec = {"step": 0, **evaluate(eval_fn, params, eval_batches)}  # collective: all processes
      if is_main:
        _append_jsonl(metrics_path, rec)
      save_at(0, params, opt_state)

    t_last, tok_last = time.perf_counter(), 0
    t0 = time.perf_counter()

    def drain(pending):
      nonlocal skipped, t_last, tok_last
      i, m = pending
      loss = float(m["loss"])
      ok = bool(m["ok"])
      if not ok or not math.isfinite(loss):
        if tc.skip_nonfinite_steps > 0 and skipped < tc.skip_nonfinite_steps:
          skipped += 1
          log.warning("non-finite loss or update at step %d: skipped (%d/%d)", i, skipped,
                      tc.skip_nonfinite_steps)
          return
        raise NonFiniteLossError(
            f"non-finite loss or gradient (loss={loss}, grad_norm={float(m['grad_norm'])}) at "
            f"step {i}; training stopped. The last good checkpoint "
            f"is step {last_saved} in {workdir}. Lower train.lr, or pass "
            "--config.train.skip_nonfinite_steps=N to skip up to N bad batches.")
      tok_last += tokens_per_step
      if is_main and (i % tc.log_every == 0 or i == end - 1):
        now = time.perf_counter()
        tps = tok_last / max(now - t_last, 1e-9)
        t_last, tok_last = now, 0
        rec = {"step": i, "loss": loss, "acc": float(m["acc"]), "grad_norm": float(m["grad_norm"]),
               "lr": float(schedule(i)), "tokens_per_sec": tps}
        _append_jsonl(metrics_path, rec)
        if not quiet:
          done = i + 1 - start
          eta = (now - t0) / max(done, 1) * (end - i - 1)
          sys.stderr.write(f"\r[{workdir.name}] step {i + 1}/{tc.steps} loss {loss:.4f} "
                           f"{tps:,.0f} tok/s ETA {_fmt_time(eta)}   ")
          sys.stderr.flush()

    state = [params, opt_state]

    def run_step(batch, i):
      state[0], state[1], m = step_fn(state[0], state[1], batch, np.int32(i))
      return m

    def at_boundary(s, do_eval):
      if s in ckpt_steps:
        check_finite(s, state[0])
      if do_eval:
        rec = {"step": s, **evaluate(eval_fn, state[0], eval_batches)}  # collective: all processes
        if is_main:
          _append_jsonl(metrics_path, rec)
        summary.update(rec)
      save_at(s, *state)

    step_loop(dataset, mesh, tc, start, end, run_step, drain, at_boundary)
    mngr.wait_until_finished()
    mngr.close()
  if not quiet:
    sys.stderr.write("\n")
  summary.update({"step": end, "workdir": str(workdir), "skipped_steps": skipped,
                  "n_params": model.param_count(abstract_params)})
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
