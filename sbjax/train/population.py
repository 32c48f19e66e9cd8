"""The members' step: ``sbjax.train.make_train_step`` vmapped over a leading member axis, so
N models train in ONE jitted step (``sbjax.train.train(cfgs, workdirs)`` with N > 1;
``sbjax.train.members`` says what may vary between them).

Equality with separate runs: members are initialised with ``Model.init`` vmapped over their
keys, and the step is the single run's step vmapped over the member axis (params, optimizer
state; the batch broadcast when the members share their data order, else one batch per
member). A member's losses and parameters equal its separate run's up to float32
reassociation of the batched matmuls (tests: within 1e-5 absolute after 3 steps; bitwise on
the machines tried). A per-member learning rate scales the update of the optimizer built
with the base lr by lr_i / lr (``sbjax.optim.make_optimizer``: ~1 ulp per step, tests:
within 1e-5); a per-member weight decay is a traced λ_i of the member's optimizer.

A frozen trunk shared by every member (``shares_trunk``: ``train.freeze_trunk``, one data order,
the sampled objective, no gradient accumulation, a head of its own parameters) runs its
forward ONCE per step (``make_shared_trunk_step``): every member loads the same trunk
(``train.init_from`` is a shared field; ``sbjax.train.workdir.init_trunk_from``) and its
updates are zero, so member 0's trunk gives every member's features h; only the heads' steps
are vmapped. The members' losses, gradients and updates are those of the vmapped step (the
trunk behind ``stop_gradient``) up to the float32 reassociation of batched matmuls.

Sharding: parameters and optimizer state carry ``sbjax.sharding`` specs with a leading
unsharded member axis (``leading=1``); the batch shards over data×fsdp as in a single run.
"""

from __future__ import annotations

import jax

from sbjax import heads
from sbjax.losses import features_loss
from sbjax.model import Model
from sbjax.optim import scale_updates
from sbjax.train.step import make_train_step


def make_population_step(model: Model, tx, tc, scaled: bool, nan_at_step: int = -1,
                         loss=None, *, own_batches: bool = False):
  """(params_N, opt_N, batch, step, scale_N[, wd_N]) -> (params_N, opt_N, metrics_N).

  ``tx``: the members' optimizer, whose update member i scales by scale_N[i] (its lr / the
  base lr) when ``scaled``; or a function ``(lr_scale, weight_decay) -> optimizer`` called
  per member with its traced scale (None unless ``scaled``) and weight decay wd_N[i] (the
  step then takes wd_N). ``own_batches``: the batch has a leading member axis (each member's
  own data order), else one batch is shared. ``loss``: as ``make_train_step``."""
  per_member = callable(tx)

  def member_step(params, opt_state, batch, step_idx, scale, wd=None):
    if per_member:
      tx_m = tx(scale if scaled else None, wd)
    else:
      tx_m = scale_updates(tx, scale) if scaled else tx
    step = make_train_step(model, tx_m, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                           nan_at_step=nan_at_step, loss=loss)
    return step(params, opt_state, batch, step_idx)

  in_axes = (0, 0, 0 if own_batches else None, None, 0) + ((0,) if per_member else ())
  return jax.vmap(member_step, in_axes=in_axes)


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


def make_shared_trunk_step(model: Model, tx, tc, scaled: bool, nan_at_step: int = -1):
  """``make_population_step``'s step for members that share a frozen trunk
  (``shares_trunk``): h once, then each member's head loss on it, vmapped."""

  def step(params, opt_state, batch, step_idx, scale, *wd):
    h = _trunk_features(model, params, batch[:, :-1])
    loss = lambda p, b: features_loss(model, p, h, b[:, 1:])  # noqa: E731 (h is shared)
    members = make_population_step(model, tx, tc, scaled, nan_at_step, loss)
    return members(params, opt_state, batch, step_idx, scale, *wd)

  return step


def make_shared_trunk_eval(model: Model):
  """(params_N, batch) -> {loss, acc} per member, the trunk's forward once (as the step)."""

  def eval_step(params, batch):
    h = _trunk_features(model, params, batch[:, :-1])
    return jax.vmap(lambda p: features_loss(model, p, h, batch[:, 1:])[1])(params)

  return eval_step
