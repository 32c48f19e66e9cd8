"""The train state and the pure step: state in, state and metrics out (as nanodo).
``state_step(step)`` turns a ``make_train_step`` function into
``(TrainState, batch, ...) -> (TrainState with step + 1, metrics)``; vmapped, the same
function serves N members (``sbjax.train.population``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax.model import Model


class TrainState(NamedTuple):
  """One pytree for the loop: ``step`` (int32 scalar, shared by all members), ``params`` and
  ``opt_state`` (with a leading member axis in a population)."""

  step: Any
  params: Any
  opt_state: Any


def all_finite(tree) -> jax.Array:
  """True iff every element of every leaf of ``tree`` is finite."""
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def members_finite(n: int):
  """jit: per member of a stacked tree (leading axis n), all elements finite -> (n,) bool."""
  return jax.jit(lambda t: jnp.stack(
      [jnp.all(jnp.isfinite(x.reshape(n, -1)), axis=1) for x in jax.tree.leaves(t)]).all(0))


def _accumulated(loss_and_grad, params, batch, grad_accum: int):
  """Mean loss, accuracy and gradients over ``grad_accum`` micro-batches (f32 sums)."""
  micro = batch.reshape(grad_accum, batch.shape[0] // grad_accum, batch.shape[1])

  def body(carry, mb):
    g_acc, l_acc, a_acc = carry
    loss, aux, g = loss_and_grad(params, mb)
    g_acc = jax.tree.map(lambda x, y: x + y.astype(jnp.float32), g_acc, g)
    return (g_acc, l_acc + loss, a_acc + aux["acc"]), None

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
  (g_sum, l_sum, a_sum), _ = jax.lax.scan(body, (zeros, 0.0, 0.0), micro)
  grads = jax.tree.map(lambda g, p: (g / grad_accum).astype(p.dtype), g_sum, params)
  return l_sum / grad_accum, {"acc": a_sum / grad_accum}, grads


def make_train_step(model: Model, tx, grad_accum: int, skip_nonfinite: bool, *,
                    nan_at_step: int = -1, loss=None):
  """(params, opt_state, batch, step) -> (params, opt_state, metrics); batch is B×(T+1).

  ``nan_at_step`` is a test hook (never part of a Config): at that step the gradients are
  made infinite, as a bad batch would. With ``skip_nonfinite`` a step whose loss, gradient
  or update is not finite leaves params and optimizer state unchanged (``metrics["ok"]`` is
  False). ``loss`` (params, batch) -> (value, {"acc"}) replaces ``model.loss``
  (``sbjax.train.build.objective_loss``).
  """
  loss_of = model.loss if loss is None else loss

  def loss_and_grad(params, batch):
    (value, aux), grads = jax.value_and_grad(loss_of, has_aux=True)(params, batch)
    return value, aux, grads

  def step(params, opt_state, batch, step_idx=0):
    if grad_accum == 1:
      loss, aux, grads = loss_and_grad(params, batch)
    else:
      loss, aux, grads = _accumulated(loss_and_grad, params, batch, grad_accum)
    if nan_at_step >= 0:
      bad = jnp.asarray(step_idx) == nan_at_step
      grads = jax.tree.map(lambda g: jnp.where(bad, jnp.inf, 1.0).astype(g.dtype) * g, grads)
    updates, new_opt = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    gnorm = optax.tree.norm(grads)
    ok = jnp.isfinite(loss) & jnp.isfinite(gnorm)
    if skip_nonfinite:
      ok = ok & all_finite(new_params)
      new_params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
      new_opt = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_opt, opt_state)
    return new_params, new_opt, {"loss": loss, "acc": aux["acc"], "grad_norm": gnorm, "ok": ok}

  return step


def state_step(step):
  """``step(params, opt_state, batch, step_idx, *extra)`` as a pure state step:
  ``(TrainState, batch, *extra) -> (TrainState with step + 1, metrics)``."""

  def train_step(state: TrainState, batch, *extra):  # its name is the program's: jit(train_step)
    params, opt_state, metrics = step(state.params, state.opt_state, batch, state.step, *extra)
    return TrainState(state.step + 1, params, opt_state), metrics

  return train_step


def make_eval_step(model: Model):
  def eval_step(params, batch):  # the program's name: jit(eval_step)
    _, aux = model.loss(params, batch)
    return aux

  return eval_step


def evaluate(eval_fn, params, batches) -> dict:
  return evaluate_members(eval_fn, params, batches)[0]


def evaluate_members(eval_fn, params, batches) -> list[dict]:
  """{eval_loss, eval_acc} per member (a leading axis; one for a single run): the means over
  ``batches`` of ``eval_fn``'s loss and accuracy."""
  outs = [eval_fn(params, b) for b in batches]
  loss = np.atleast_1d(np.mean([np.asarray(o["loss"], np.float64) for o in outs], axis=0))
  acc = np.atleast_1d(np.mean([np.asarray(o["acc"], np.float64) for o in outs], axis=0))
  return [{"eval_loss": float(loss[i]), "eval_acc": float(acc[i])} for i in range(len(loss))]
