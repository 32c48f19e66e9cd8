"""Per-window validation losses of every checkpoint of a text run (the bootstrap units of the
saturation readout): L[k, w] = mean next-token NLL of checkpoint k on fixed validation window
w (the same windows for every checkpoint and every width, so differences are paired)."""

from __future__ import annotations

import functools
import io
import math

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.analysis.table import atomic_write_bytes
from sbjax.model import Model
from ..shared import load_np, upath

FILE = "windows.npz"


def validation_windows(ds, n: int) -> np.ndarray:
  """The first ``n`` fixed validation windows [n, seq_len + 1] (``Dataset.eval_batches``; the
  analysis's evaluation sample starts with the same windows)."""
  k = math.ceil(n / ds.global_batch_size)
  return np.concatenate(ds.eval_batches(k))[:n]


@functools.lru_cache(maxsize=8)
def _nll_fn(mc):
  model = Model(mc)

  def f(params, x, y):
    logq = jax.nn.log_softmax(model.apply(params, x).astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logq, y[..., None], axis=-1)[..., 0].mean(-1)

  return jax.jit(f)


def window_losses(wd, windows_WxT1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(steps, L[K, W]) of every checkpoint of ``wd``; kept in ``wd/windows.npz`` and reused
  while the checkpoints and the windows are the same."""
  path = upath(wd) / FILE
  steps = np.asarray(ckpt.list_steps(wd), np.int64)
  if path.exists():
    with load_np(path) as z:
      if np.array_equal(z["steps"], steps) and np.array_equal(z["windows"], windows_WxT1):
        return steps, z["loss_KxW"]
  fn = _nll_fn(ckpt.load_config(wd).model)
  x, y = windows_WxT1[:, :-1], windows_WxT1[:, 1:]
  out = np.stack([np.asarray(fn(ckpt.load_params(wd, int(s))[1], x, y), np.float64)
                  for s in steps])
  buf = io.BytesIO()
  np.savez(buf, steps=steps, windows=windows_WxT1, loss_KxW=out)
  atomic_write_bytes(path, buf.getvalue())
  return steps, out
