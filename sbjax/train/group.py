"""Groups of same-shape models trained in one vmapped program (the collapse grid).

``train_group(mc, tc, members, datasets, snapshot_steps)`` trains M members of one
architecture ``mc`` together, a composition of ``sbjax.train.loop.run_loop``: the step is
``sbjax.train.make_train_step`` vmapped over a leading member axis (as
``sbjax.train.population``), but every member has its OWN batch (its own data-order seed:
batch i of member m is ``datasets[m].train_batch(i)``, a pure function of (data_seed_m,
i)), its own init seed and its own decoupled weight decay λ_m:

    u = -lr(t) · (Adam(g) + λ_m · p)   (on matrices only; ``sbjax.optim.decay_mask``)

which is ``optax.adamw`` written as its chain (clip → scale_by_adam →
add_decayed_weights(λ_m) → scale_by_learning_rate), so λ_m can be a traced per-member
value. (A population shares the batch and scales only the learning rate, so it cannot
express data-order seeds or per-member weight decay.) The snapshot steps are the loop's
save boundaries, kept in memory (``hooks.Snapshots``): with a constant learning rate after
warm-up (``train.min_lr_ratio=1``) the snapshot at step S equals a run trained for exactly
S steps, so one 3-epoch run also gives the 1-epoch model.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax.config import ModelConfig, TrainConfig
from sbjax.model import Model
from sbjax.optim import decay_mask, lr_schedule
from sbjax.train import hooks as H
from sbjax.train.loop import Schedule, run_loop
from sbjax.train.step import TrainState, make_train_step, state_step

log = logging.getLogger("sbjax")


@dataclasses.dataclass(frozen=True)
class Member:
  """One model of a group: init seed, data-order seed, decoupled weight decay."""

  seed: int = 0
  data_seed: int = 0
  weight_decay: float = 0.0


def member_tx(tc: TrainConfig, weight_decay) -> optax.GradientTransformation:
  """``sbjax.optim.make_optimizer`` (no frozen trunk) with a possibly traced weight decay."""
  return optax.chain(
      optax.clip_by_global_norm(tc.clip),
      optax.scale_by_adam(b1=tc.b1, b2=tc.b2, eps=tc.eps),
      optax.add_decayed_weights(weight_decay, mask=decay_mask),
      optax.scale_by_learning_rate(lr_schedule(tc)),
  )


@functools.lru_cache(maxsize=16)
def _group_fns(mc: ModelConfig, tc: TrainConfig):
  """Jitted (init, optimizer init, vmapped state step) of one architecture and schedule,
  shared by every group with the same configs (compiled once per member count)."""
  model = Model(mc)

  def member_step(params, opt_state, batch, step_idx, wd):
    step = make_train_step(model, member_tx(tc, wd), 1, False)
    return step(params, opt_state, batch, step_idx)

  step_fn = jax.jit(state_step(jax.vmap(member_step, in_axes=(0, 0, 0, None, 0))),
                    donate_argnums=(0,))
  init_fn = jax.jit(jax.vmap(lambda k: model.init(k, 1, tc.seq_len)))
  opt_init = jax.jit(jax.vmap(member_tx(tc, 0.0).init))
  return init_fn, opt_init, step_fn


def _check(members, datasets, snapshot_steps, tc: TrainConfig) -> None:
  if len(members) < 1 or len(datasets) != len(members):
    raise ValueError(f"train_group needs one dataset per member; got {len(members)} members "
                     f"and {len(datasets)} datasets")
  if min(snapshot_steps) < 1:
    raise ValueError(f"snapshot steps must be >= 1, got {sorted(snapshot_steps)}")
  if tc.grad_accum != 1:
    raise ValueError("train_group supports train.grad_accum=1 only")


def train_group(mc: ModelConfig, tc: TrainConfig, members: Sequence[Member], datasets,
                snapshot_steps: Sequence[int], *, log_every: int = 0, name: str = "group"):
  """Train the members together for ``max(snapshot_steps)`` steps (see the module doc).

  ``datasets[m]`` gives member m's batches (``train_batch(i)``: B×(T+1) int32). Progress
  (``log_every`` > 0): a bar on a terminal, else a line every ``log_every`` steps.
  Returns ``(snapshots, info)``: ``snapshots[S]`` = host numpy stacked params (leading
  axis M) at step S; ``info`` = {"train_loss": (M,) mean loss of the last ≤100 steps,
  "seconds", "steps", "tokens_per_member", "nonfinite_members"}.
  """
  _check(members, datasets, snapshot_steps, tc)
  steps = int(max(snapshot_steps))
  tc = dataclasses.replace(tc, steps=steps)
  init_fn, opt_init, step_fn = _group_fns(mc, tc)
  keys = jax.vmap(jax.random.key)(jnp.asarray([mb.seed for mb in members], jnp.uint32))
  params = init_fn(keys)
  state = TrainState(jnp.asarray(np.int32(0)), params, opt_init(params))
  wds = jnp.asarray([mb.weight_decay for mb in members], jnp.float32)
  snaps, losses = H.Snapshots(), H.LossWindow(100)
  hooks = [losses, snaps]
  if log_every:
    hooks.append(H.Progress(name, steps, log_every, min_interval=0.0))
  t0 = time.perf_counter()

  def batches(i):
    return jnp.asarray(np.stack([np.asarray(ds.train_batch(i)) for ds in datasets]))

  run_loop(state, lambda s, b: step_fn(s, b, wds), batches, 0, steps, hooks,
           Schedule(save_steps=frozenset(int(s) for s in snapshot_steps)))
  loss = np.stack(losses.losses).astype(np.float64)
  bad = sorted(np.flatnonzero(~np.isfinite(loss).all(0)).tolist())
  if bad:  # recorded, not raised: the other members of the group are still measured
    log.warning("%s: members %s reached a non-finite training loss (lower train.lr); their "
                "collapse metrics will be NaN", name, bad)
  info = {"train_loss": loss.mean(0), "seconds": time.perf_counter() - t0, "steps": steps,
          "tokens_per_member": steps * tc.batch_size * tc.seq_len, "nonfinite_members": bad}
  return snaps.snaps, info
