"""The width sweep's measurement of a chunk of checkpoints: one vmapped forward over them
(``sbjax.analysis.forward``'s passes and rows, the ``sbjax.metrics`` kernels) on the first
``eval_sequences`` fixed validation windows: the columns of ``sbjax.analysis`` (loss,
anisotropy, the raw and centred head spectra), with ``gamma``, ``top_<i>`` (σ_i / σ_1 of the
head, the Fig. 4 heat-map) and ``loss_w<w>`` (the NLL of window w: the bootstrap units)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import optim
from sbjax.analysis import forward as fw
from sbjax.analysis import samples
from sbjax.analysis.rows import GroupResult, step_row
from sbjax.analysis.settings import Settings
from sbjax.model import Model

from .planted_measure import WINDOW

# checkpoints per vmapped forward: as many as fit in GROUP_BYTES (the analysis's rule; the
# group size moves the last float32 digits of the centred spectrum, so it is kept)
GROUP_BYTES = 1 << 30


def settings(k, width: int) -> Settings:
  dims = tuple(d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if d <= width)
  return Settings(groups=("loss", "anisotropy", "spectrum"), eval_sequences=k.eval_sequences,
                  cka_sequences=k.eval_sequences, anisotropy_tokens=k.anisotropy_tokens,
                  w_error_dims=dims, batch_sequences=min(32, k.eval_sequences), progress=False)


@functools.lru_cache(maxsize=8)
def _window_nll(mc):
  """jit: the mean next-token NLL of every window, (W,)."""
  model = Model(mc)

  def f(params, x, y):
    logq = jax.nn.log_softmax(model.apply(params, x).astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logq, y[..., None], axis=-1)[..., 0].mean(-1)

  return jax.jit(f)


def _group_size(cfg, st: Settings, params, n: int) -> int:
  pbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  mc = cfg.model
  acts = 4 * fw.chunk_size(st.batch_sequences, st.sample_sequences) * cfg.train.seq_len * (
      mc.d_model * (2 + 3 * mc.n_layers))
  return int(max(1, min(n, GROUP_BYTES // (pbytes + acts))))


def measure(cfg, ds, k, steps: list, params: list) -> list[dict]:
  """One row per checkpoint (module doc); ``cfg`` the run's saved Config, ``ds`` its data."""
  st, mc = settings(k, cfg.model.d_model), cfg.model
  sm = samples.build(cfg, None, st, ds)
  weight_fn, wdims = fw.cached_weight_metrics(mc, fw.weight_settings(st))
  x, y = jnp.asarray(sm.ev[:, :-1]), jnp.asarray(sm.ev[:, 1:])
  g, rows = _group_size(cfg, st, params[0], len(steps)), []
  gamma = optim.gamma_at(cfg.train, list(steps))
  for i in range(0, len(steps), g):
    chunk = params[i:i + g]
    stacked = fw.stack_params(chunk + [chunk[-1]] * (g - len(chunk)))  # no recompilation
    res = GroupResult(acc=fw.eval_pass(mc, stacked, sm, st),
                      wm=jax.device_get(weight_fn(stacked)))
    res.an = np.asarray(fw.aniso_layers(res.acc["resid"]))
    res.an_last = np.asarray(fw.aniso_last(res.acc["h_sel"]))
    nll = [np.asarray(_window_nll(mc)(p, x, y), np.float64) for p in chunk]
    for j, s in enumerate(steps[i:i + len(chunk)]):
      row, top, _ = step_row(s, j, res, sm, st, mc.n_layers, wdims)
      rows.append({"step": row.pop("step"), "gamma": float(gamma[i + j]), **row,
                   **{f"top_{n}": v for n, v in enumerate(top) if np.isfinite(v)},
                   **{f"{WINDOW}{w}": float(v) for w, v in enumerate(nll[j])}})
  return rows
