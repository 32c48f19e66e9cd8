"""The bare sharded training step on a mesh (not a test), shared by benchmarks/mesh_overhead.py
(steps/s per mesh) and tests/_multidevice.py (the same steps on every mesh give the same
losses and parameters).

``train.make_train_step`` jitted with in/out shardings (parameters and optimizer state by
``sharding.tree_shardings``, the batch by ``batch_sharding``, the step and metrics
replicated) and the parameters and optimizer state donated, as ``sbjax.train`` shards them.
"""

from __future__ import annotations

import jax

from sbjax import sharding as shd
from sbjax import train as train_lib
from sbjax.model import Model
from sbjax.optim import make_optimizer


def mesh_train_step(cfg, mesh, params0):
  """(step, params, opt_state): the jitted step of ``cfg`` on ``mesh``, ``params0`` placed
  on it and a fresh optimizer state of them (placed under ``jax.set_mesh(mesh)``). Call the
  step under ``jax.set_mesh(mesh)`` too: ``step(params, opt_state, batch, np.int32(i))``
  returns (params, opt_state, metrics), the batch placed by ``sharding.global_batch``."""
  tc, mc = cfg.train, cfg.model
  model = Model(mc)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, mc, abstract)
  param_sh = shd.tree_shardings(abstract, mesh)
  opt_sh = shd.tree_shardings(jax.eval_shape(tx.init, abstract), mesh)
  repl = shd.replicated(mesh)
  with jax.set_mesh(mesh):
    params = jax.device_put(params0, param_sh)
    opt = jax.jit(tx.init, out_shardings=opt_sh)(params)
  step = jax.jit(train_lib.make_train_step(model, tx, tc.grad_accum, False),
                 in_shardings=(param_sh, opt_sh, shd.batch_sharding(mesh), repl),
                 out_shardings=(param_sh, opt_sh, repl), donate_argnums=(0, 1))
  return step, params, opt
