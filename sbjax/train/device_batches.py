"""Train batches drawn inside the jitted step (``data.options.sampler = "device"``): a run whose
datasets have ``device_tables`` (``sbjax.data.dataset.DevicePlanted``) trains with ONE jitted
program ``step(state, tables, *extra)`` that draws the batch of step ``state.step`` from the
device tables (``sbjax.data.planted_device.train_batch``), a pure function of (planted seed,
data seed, step), so a resumed run draws the uninterrupted run's batches. Members with their
own data seeds draw their own batches.
"""

from __future__ import annotations

import jax
import numpy as np

from sbjax.data import planted_device
from sbjax.train.step import TrainState


def fused(fns, datasets):
  """(step, tables) of a run whose batches are drawn on the device (module doc), or None
  when its datasets are read on the host. The fused programs are kept on the build ``fns``."""
  if not all(hasattr(d, "device_tables") for d in datasets):
    return None
  d0 = datasets[0]
  tables = d0.device_tables()
  if len(datasets) > 1:  # members with their own data orders: one batch per data seed
    tables = tables._replace(data_seed=np.asarray([d.seed for d in datasets], np.uint32))
  tables = jax.device_put(tables, fns.repl)  # once per run, replicated on the mesh
  shape = (d0.global_batch_size, d0.seq_len, d0.planted.context, len(datasets))
  cache = vars(fns).setdefault("device_steps", {})
  if shape not in cache:
    batch, seq_len, context, _ = shape
    inner = fns.step

    def step(state, t, *extra):
      return inner(state, planted_device.train_batch(t, state.step, batch, seq_len, context),
                   *extra)

    cache[shape] = jax.jit(step, donate_argnums=(0,),
                           out_shardings=(TrainState(fns.repl, fns.p_sh, fns.o_sh), fns.repl))
  return cache[shape], tables
