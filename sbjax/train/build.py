"""The jitted programs of a run of N members: N = 1 is the plain run's step; N > 1 the members'
step (``sbjax.train.population``), vmapped over a leading member axis.

``build(cfg, mesh, nan_at_step, n, varies)`` (under ``set_mesh``) returns a namespace: the
model, its abstract trees, the shardings (``p_sh``/``o_sh`` of the state, ``p_sh1``/``o_sh1``
of one member, ``batch_sh``, ``repl``), ``keys(seeds)``, ``init(keys)``, ``opt_init``,
``step(state, batch, *per_member)``, ``eval``, ``evaluate(params, batches)`` (one {eval_loss,
eval_acc} per member), ``finite(params)``, ``split(state)`` and ``join(params, opts)``. ``cfg``
is member 0's config; the members' lr scales and weight decays are arguments of the step.

One build per process serves every run that differs only in ``LOOP_ONLY`` fields (read by the
loop, never by a program): ``build`` is memoised on ``program_key``, the mesh and its extra
arguments (the ``MAX_BUILDS`` most recently used).
"""

from __future__ import annotations

import collections
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from sbjax import heads, losses
from sbjax import sharding as shd
from sbjax.config import Config
from sbjax.data import sources as data_sources
from sbjax.model import Model
from sbjax.optim import make_optimizer
from sbjax.train.members import Varies
from sbjax.train.population import (make_population_step, make_shared_trunk_eval,
                                    make_shared_trunk_step, shares_trunk)
from sbjax.train.step import (TrainState, evaluate_members, make_eval_step, make_train_step,
                              members_finite, state_step)

ONE = Varies(False, False, False)
# TrainConfig fields read only by the loop, its hooks or the start (never by a jitted program)
LOOP_ONLY = frozenset({"seed", "data_seed", "eval_every", "eval_batches", "log_every",
                       "ckpt_every", "ckpt_log_spaced", "keep_every_n", "async_checkpoint",
                       "init_from", "init_step"})
MAX_BUILDS = 8


def program_key(cfg: Config) -> tuple:
  """What a run's programs depend on: the model config, every train field outside
  ``LOOP_ONLY`` (``skip_nonfinite_steps`` only as on/off), and the data config under
  ``train.objective=expected`` (its step holds the language's table)."""
  tc = cfg.train
  fields = tuple((f.name, getattr(tc, f.name)) for f in dataclasses.fields(tc)
                 if f.name not in LOOP_ONLY and f.name != "skip_nonfinite_steps")
  data = cfg.data if tc.objective == "expected" else None
  return cfg.model, fields, tc.skip_nonfinite_steps > 0, data


def cached(build):
  """``build(cfg, mesh, *extra)`` memoised on ``(program_key(cfg), mesh, extra)``."""
  cache: collections.OrderedDict = collections.OrderedDict()

  def get(cfg: Config, mesh, *extra):
    key = (program_key(cfg), mesh, extra)
    if key in cache:
      cache.move_to_end(key)
      return cache[key]
    fns = cache[key] = build(cfg, mesh, *extra)
    while len(cache) > MAX_BUILDS:
      cache.popitem(last=False)
    return fns

  get.uncached = build
  return get


def frozen_trunk(loss, cfg: Config):
  """``loss`` with, under ``train.freeze_trunk``, every non-head parameter behind
  ``stop_gradient`` (their updates are zero anyway): the backward pass stops at the head's
  input. The step's ``grad_norm`` is then the norm of the head's gradient."""
  if not cfg.train.freeze_trunk:
    return loss
  keys = set(heads.get(cfg.model.head).param_keys)

  def fn(params, batch):
    return loss({k: v if k in keys else jax.lax.stop_gradient(v) for k, v in params.items()},
                batch)

  return fn


def objective_loss(cfg: Config, model: Model):
  """The loss of ``cfg.train.objective`` (``sbjax.losses``): ``Model.loss`` when sampled, the
  Rao-Blackwellised loss on the planted language's exact table when expected; the trunk
  behind ``stop_gradient`` when frozen (``frozen_trunk``)."""
  return frozen_trunk(_objective(cfg, model), cfg)


def _objective(cfg: Config, model: Model):
  if cfg.train.objective == "sampled":
    return model.loss
  lang = data_sources.get(cfg.data.source).language(cfg.data.options)
  if lang.vocab > cfg.model.vocab_size:
    raise ValueError(f"train.objective=expected: the planted language has {lang.vocab} tokens "
                     f"but model.vocab_size={cfg.model.vocab_size}; set model.vocab_size=0 "
                     "(from the data) or >= the language's vocabulary")
  probs = np.zeros((lang.n_contexts, cfg.model.vocab_size), np.float32)
  probs[:, :lang.vocab] = lang.probs
  return losses.expected_loss(model, probs, lang.context)


def _common(cfg: Config, mesh) -> types.SimpleNamespace:
  """What every N shares: the model, one member's abstract trees and shardings, the
  optimizer built with member 0's settings."""
  tc, mc = cfg.train, cfg.model
  model = Model(mc)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, mc, abstract)
  abstract_opt = jax.eval_shape(tx.init, abstract)
  return types.SimpleNamespace(
      model=model, abstract=abstract, abstract_opt=abstract_opt, tx=tx,
      p_sh1=shd.tree_shardings(abstract, mesh), o_sh1=shd.tree_shardings(abstract_opt, mesh),
      repl=shd.replicated(mesh), eval_batch_sh=shd.batch_sharding(mesh))


def _one(cfg: Config, c: types.SimpleNamespace, nan_at_step: int) -> types.SimpleNamespace:
  tc, model = cfg.train, c.model
  state_sh = TrainState(c.repl, c.p_sh1, c.o_sh1)
  step = make_train_step(model, c.tx, tc.grad_accum, tc.skip_nonfinite_steps > 0,
                         nan_at_step=nan_at_step, loss=objective_loss(cfg, model))
  ev = jax.jit(make_eval_step(model), in_shardings=(c.p_sh1, c.eval_batch_sh),
               out_shardings=c.repl)
  return types.SimpleNamespace(
      **vars(c), p_sh=c.p_sh1, o_sh=c.o_sh1, batch_sh=c.eval_batch_sh,
      keys=lambda seeds: jax.random.key(seeds[0]),
      init=jax.jit(lambda k: model.init(k, 1, tc.seq_len), out_shardings=c.p_sh1),
      opt_init=jax.jit(c.tx.init, out_shardings=c.o_sh1),
      step=jax.jit(state_step(step), in_shardings=(state_sh, c.eval_batch_sh),
                   out_shardings=(state_sh, c.repl), donate_argnums=(0,)),
      eval=ev, evaluate=lambda p, batches: evaluate_members(ev, p, batches),
      finite=members_finite(1), split=lambda s: [(s.params, s.opt_state)],
      join=lambda ps, os_: (ps[0], os_[0]))


def _stack(trees):
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _stacked(tree, n: int):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct((n,) + x.shape, x.dtype), tree)


def members_init(cfg: Config, heads: tuple):
  """keys (n,) -> the members' stacked params: ``Model.init`` vmapped over the keys, or with
  per-member ``heads``, each head's model vmapped over its members' keys, in member order."""
  seq = cfg.train.seq_len
  if not heads:
    return jax.vmap(lambda k: Model(cfg.model).init(k, 1, seq))
  groups: dict = {}
  for i, h in enumerate(heads):
    groups.setdefault(h, []).append(i)
  order = np.argsort(np.concatenate([np.asarray(ix) for ix in groups.values()]))

  def init(keys):
    parts = [jax.vmap(lambda k, h=h: Model(dataclasses.replace(cfg.model, head=h))
                      .init(k, 1, seq))(keys[np.asarray(ix)]) for h, ix in groups.items()]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs)[order], *parts)

  return init


def _members(cfg: Config, mesh, c: types.SimpleNamespace, nan_at_step: int, n: int,
             varies: Varies, share_trunk: bool) -> types.SimpleNamespace:
  tc, model = cfg.train, c.model
  p_sh = shd.tree_shardings(_stacked(c.abstract, n), mesh, leading=1)
  o_sh = shd.tree_shardings(_stacked(c.abstract_opt, n), mesh, leading=1)
  batch_sh = NamedSharding(mesh, P(None, *shd.batch_spec())) if varies.data else c.eval_batch_sh
  state_sh = TrainState(c.repl, p_sh, o_sh)

  def tx_of(lr_scale, weight_decay):  # member 0's optimizer unless the members differ
    return make_optimizer(tc, cfg.model, c.abstract, lr_scale=lr_scale,
                          weight_decay=weight_decay if varies.weight_decay else None)

  if share_trunk and shares_trunk(cfg, varies.data):  # a frozen trunk's forward once for all
    step = make_shared_trunk_step(model, tx_of, tc, varies.lr, nan_at_step)
    ev_fn = make_shared_trunk_eval(model)
  else:
    step = make_population_step(model, tx_of, tc, varies.lr, nan_at_step,
                                objective_loss(cfg, model), own_batches=varies.data)
    ev_fn = jax.vmap(make_eval_step(model), in_axes=(0, None))
  ev = jax.jit(ev_fn, in_shardings=(p_sh, c.eval_batch_sh), out_shardings=c.repl)
  take = jax.jit(lambda p, o, i: jax.tree.map(lambda x: x[i], (p, o)),
                 out_shardings=(c.p_sh1, c.o_sh1))
  return types.SimpleNamespace(
      **vars(c), p_sh=p_sh, o_sh=o_sh, batch_sh=batch_sh,
      keys=lambda seeds: jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32)),
      init=jax.jit(members_init(cfg, varies.heads), out_shardings=p_sh),
      opt_init=jax.jit(jax.vmap(c.tx.init), out_shardings=o_sh),
      step=jax.jit(state_step(step), in_shardings=(state_sh, batch_sh, c.repl, c.repl),
                   out_shardings=(state_sh, c.repl), donate_argnums=(0,)),
      eval=ev, evaluate=lambda p, batches: evaluate_members(ev, p, batches),
      finite=members_finite(n),
      split=lambda s: [take(s.params, s.opt_state, np.int32(j)) for j in range(n)],
      join=lambda ps, os_: (jax.device_put(_stack(ps), p_sh), jax.device_put(_stack(os_), o_sh)))


@cached
def build(cfg: Config, mesh, nan_at_step: int, n: int = 1, varies: Varies = ONE,
          share_trunk: bool = True) -> types.SimpleNamespace:
  """The programs of a run of ``n`` members (module doc); ``nan_at_step``: the test hook of
  ``sbjax.train.train``; ``share_trunk=False``: members on one frozen trunk recompute its
  forward each (the reference of the shared step's test)."""
  c = _common(cfg, mesh)
  return _one(cfg, c, nan_at_step) if n == 1 else _members(cfg, mesh, c, nan_at_step, n,
                                                           varies, share_trunk)
