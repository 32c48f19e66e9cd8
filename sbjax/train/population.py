"""The members' step: ``sbjax.train.make_train_step`` vmapped over a leading member axis, so
N models train in ONE jitted step (``sbjax.train.members`` says what may vary between them).

A member's losses and parameters equal its separate run's up to float32 reassociation of the
batched matmuls.

Members sharing a frozen trunk (``shares_trunk``) run its forward ONCE per step
(``make_shared_trunk_step``): they all load the same trunk and its updates are zero, so member
0's trunk gives every member's features h; only the heads' steps are vmapped.

Sharding: parameters and optimizer state carry ``sbjax.sharding`` specs with a leading
unsharded member axis (``leading=1``); the batch shards over data×fsdp as in a single run.
"""

from __future__ import annotations

import jax

from sbjax import heads
from sbjax.losses import features_loss
from sbjax.model import Model
from sbjax.train.step import make_train_step


def make_population_step(model: Model, tx_of, tc, scaled: bool, nan_at_step: int = -1,
                         loss=None, *, own_batches: bool = False):
  """(params_N, opt_N, batch, step, scale_N, wd_N) -> (params_N, opt_N, metrics_N).

  ``tx_of(lr_scale, weight_decay)``: member i's optimizer, called with its traced scale
  scale_N[i] (its lr / the base lr; None unless ``scaled``) and weight decay wd_N[i].
  ``own_batches``: the batch has a leading member axis (each member's own data order), else
  one batch is shared. ``loss``: as ``make_train_step``."""

  def member_step(params, opt_state, batch, step_idx, scale, wd):
    step = make_train_step(model, tx_of(scale if scaled else None, wd), tc.grad_accum,
                           tc.skip_nonfinite_steps > 0, nan_at_step=nan_at_step, loss=loss)
    return step(params, opt_state, batch, step_idx)

  return jax.vmap(member_step, in_axes=(0, 0, 0 if own_batches else None, None, 0, 0))


def shares_trunk(cfg, own_batches: bool) -> bool:
  """Whether a population of ``cfg``'s members computes the trunk's forward once
  (module doc): a frozen trunk, one batch for all, ``train.objective=sampled``, no gradient
  accumulation, and a head whose parameters the trunk does not read (not tied)."""
  tc = cfg.train
  return (tc.freeze_trunk and not own_batches and tc.objective == "sampled"
          and tc.grad_accum == 1 and heads.get(cfg.model.head).param_keys == (heads.HEAD_KEY,))


def _trunk_features(model: Model, params_N, inputs):
  """h of member 0's trunk (behind ``stop_gradient``): the features every member shares."""
  trunk = {k: jax.tree.map(lambda x: jax.lax.stop_gradient(x[0]), v)
           for k, v in params_N.items() if k != heads.HEAD_KEY}
  return model.features(trunk, inputs)


def make_shared_trunk_step(model: Model, tx_of, tc, scaled: bool, nan_at_step: int = -1):
  """``make_population_step``'s step for members that share a frozen trunk
  (``shares_trunk``): h once, then each member's head loss on it, vmapped."""

  def step(params, opt_state, batch, step_idx, scale, wd):
    h = _trunk_features(model, params, batch[:, :-1])
    loss = lambda p, b: features_loss(model, p, h, b[:, 1:])  # noqa: E731 (h is shared)
    members = make_population_step(model, tx_of, tc, scaled, nan_at_step, loss)
    return members(params, opt_state, batch, step_idx, scale, wd)

  return step


def make_shared_trunk_eval(model: Model):
  """(params_N, batch) -> {loss, acc} per member, the trunk's forward once (as the step)."""

  def eval_step(params, batch):
    h = _trunk_features(model, params, batch[:, :-1])
    return jax.vmap(lambda p: features_loss(model, p, h, batch[:, 1:])[1])(params)

  return eval_step
