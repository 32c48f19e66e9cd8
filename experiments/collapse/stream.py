"""The collapse pass: the authors' three streaming passes over a stack of models at once.

``collapse_pass(mc, stacked_params, train_windows, val_windows, min_counts=(1, 20))``, the
models stacked on a leading axis; features h = the final-norm output (the head input), labels =
the next tokens: (1) train split: per-class sums and counts -> mu_c; (2) train split: per-class
sum ||h_i - mu_c||^2 -> sigma_c^2 (two-pass variance; the features of pass 1 are kept when they
fit in ``feature_cache_bytes``, else recomputed); (3) validation: NC4 hits and the loss
-(1/N_val) sum log softmax(z_i)[y_i]. One set of passes gives the metrics at every min_count
(``sbjax.metrics.collapse_metrics_from_stats`` per model: blocked pairs, never K x K).

A stack of one model is padded to two (``stack``): XLA:CPU drops a vmapped axis of size 1 and
then rounds differently (1e-5 relative); in stacks of two or more a model's numbers do not
depend on the others.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import heads as heads_lib
from sbjax.config import ModelConfig
from sbjax import metrics as C
from sbjax.model import Model

log = logging.getLogger("sbjax")


def stack(params: list):
  """Host params of several models stacked on a new leading axis (at least two: module doc)."""
  params = list(params) + list(params[:1]) * (len(params) < 2)
  return jax.tree.map(lambda *a: np.stack([np.asarray(x) for x in a]), *params)


def windows(tokens: np.ndarray, seq_len: int) -> np.ndarray:
  """Packed windows [n, T+1] of a token stream (start every T tokens)."""
  n = (len(tokens) - 1) // seq_len
  return tokens[np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)].astype(np.int32)


def _chunks(wins: np.ndarray, chunk: int):
  """Static-shape chunks (inputs, targets, valid) of packed windows [n, T+1]."""
  for s in range(0, wins.shape[0], chunk):
    w = wins[s:s + chunk]
    valid = np.zeros((chunk, w.shape[1] - 1), bool)
    valid[:w.shape[0]] = True
    if w.shape[0] < chunk:
      w = np.concatenate([w, np.repeat(w[:1], chunk - w.shape[0], 0)])
    yield jnp.asarray(w[:, :-1]), jnp.asarray(w[:, 1:]).reshape(-1), jnp.asarray(valid.ravel())


@functools.lru_cache(maxsize=16)
def _forward_fn(mc: ModelConfig, with_loss: bool):
  """jit(vmap) forward: features h (M, n, d) and, with ``with_loss``, the per-token NLL (M, n)."""
  model = Model(mc)

  def one(p, x, y):
    scores, ex = model.forward(p, x, ("h",))
    h = ex["h"].reshape(-1, ex["h"].shape[-1]).astype(jnp.float32)
    if not with_loss:
      return h, jnp.zeros((0,), jnp.float32)
    logp = jax.nn.log_softmax(scores.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, y.reshape(x.shape)[..., None], axis=-1)[..., 0]
    return h, nll.reshape(-1)

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


@functools.lru_cache(maxsize=16)
def _head_fn(mc: ModelConfig):
  return jax.jit(jax.vmap(lambda p: heads_lib.head_matrix(p, mc).astype(jnp.float32)))


_mean_upd = jax.jit(jax.vmap(C.mean_update, in_axes=(0, 0, None, None)))
_var_upd = jax.jit(jax.vmap(C.var_update, in_axes=(0, 0, None, 0, None)))


@functools.lru_cache(maxsize=4)
def _nc4_upd_fn(chunk_size: int):
  def upd(st, h, y, w, mu, wv, mv, m):
    return C.nc4_update(st, h, y, w, mu, w_valid=wv, mean_valid=mv, valid=m, chunk_size=chunk_size)

  return jax.jit(jax.vmap(upd, in_axes=(0, 0, None, 0, 0, None, None, None)))


def _class_stats(fwd, params, train_windows, chunk, v, d, m, feature_cache_bytes):
  """Passes 1 and 2: (means, variances, counts numpy, train tokens) of every model."""
  n_train = int(train_windows.shape[0] * (train_windows.shape[1] - 1))
  cache_ok = n_train * d * 4 * m <= feature_cache_bytes
  cache = []
  st = jax.vmap(lambda _: C.mean_init(v, d))(jnp.arange(m))
  for x, y, valid in _chunks(train_windows, chunk):
    h, _ = fwd(params, x, y)
    st = _mean_upd(st, h, y, valid)
    if cache_ok:
      cache.append((h, y, valid))
  means, counts = jax.vmap(C.class_means)(st)
  vs = jax.vmap(lambda _: C.var_init(v))(jnp.arange(m))
  feats = cache if cache_ok else ((fwd(params, x, y)[0], y, valid)
                                  for x, y, valid in _chunks(train_windows, chunk))
  for h, y, valid in feats:
    vs = _var_upd(vs, h, y, means, valid)
  return means, jax.vmap(C.class_variances)(vs), np.asarray(counts[0]), n_train


def _usable(counts_np, min_counts) -> dict:
  """{min_count: '' or why it has < 2 analysed classes}; the smallest one must be usable."""
  why = {}
  for m in min_counts:
    try:
      C.analyzed_classes(counts_np, m)
      why[m] = ""
    except ValueError as e:
      if m == min(min_counts):
        raise
      why[m] = str(e)[:300]
  return why


def collapse_pass(mc: ModelConfig, stacked_params, train_windows: np.ndarray,
                  val_windows: np.ndarray, *, min_counts=(1,), cdnv_exponent: float = 2.0,
                  weighted_mean: bool = False, nc4_search: str = "analyzed", chunk: int = 32,
                  block_size: int = 512, nc4_chunk_size: int = 4096,
                  feature_cache_bytes: int = 1 << 30) -> list[dict]:
  """Per model {min_count: result}: every scalar key of ``collapse_metrics``, ``val_loss``,
  ``val_tokens``, ``train_tokens``, ``error`` ('' or why the metrics are undefined: a
  min_count with < 2 analysed classes, non-finite features)."""
  fwd, fwd_loss = _forward_fn(mc, False), _forward_fn(mc, True)
  v, d = mc.vocab_size, mc.d_model
  m = int(jax.tree.leaves(stacked_params)[0].shape[0])
  params = jax.device_put(stacked_params)
  means, variances, counts_np, n_train = _class_stats(fwd, params, train_windows, chunk, v, d, m,
                                                      feature_cache_bytes)
  why = _usable(counts_np, min_counts)
  ok = [mcount for mcount in min_counts if not why[mcount]]
  w = _head_fn(mc)(params)
  sets = {}
  for mcount in ok:
    rows = [C.nc4_search_set(means[i], counts_np, w[i], min_count=mcount, search=nc4_search)
            for i in range(m)]
    sets[mcount] = (jnp.stack([r[0] for r in rows]), jnp.stack([r[1] for r in rows]),
                    rows[0][2], rows[0][3])
  nc4_upd = _nc4_upd_fn(nc4_chunk_size)
  nc4 = {mcount: jax.vmap(lambda _: C.nc4_init(v))(jnp.arange(m)) for mcount in ok}
  nll_sum, n_val = np.zeros(m, np.float64), 0
  for x, y, valid in _chunks(val_windows, chunk):
    h, nll = fwd_loss(params, x, y)
    for mcount in ok:
      nc4[mcount] = nc4_upd(nc4[mcount], h, y, *sets[mcount], valid)
    nll_sum += np.asarray(jnp.sum(jnp.where(valid[None], nll, 0.0), axis=1), np.float64)
    n_val += int(np.asarray(valid).sum())
  arrays = tuple(np.asarray(a) for a in (means, variances, w))
  common = {"val_tokens": n_val, "train_tokens": n_train}
  out = []
  for i in range(m):
    per = {}
    for mcount in min_counts:
      st = (C.NC4State(hits=nc4[mcount].hits[i], counts=nc4[mcount].counts[i])
            if mcount in nc4 else None)
      r = _model_metrics(i, arrays, counts_np, st, why[mcount], min_count=mcount,
                         cdnv_exponent=cdnv_exponent, weighted_mean=weighted_mean,
                         block_size=block_size)
      per[mcount] = {**r, **common, "val_loss": float(nll_sum[i] / max(n_val, 1))}
    out.append(per)
  return out


def _model_metrics(i, arrays, counts_np, nc4_state, why: str, **kw) -> dict:
  """collapse_metrics_from_stats of model i, or an error row (never raises)."""
  means_np, var_np, w_np = arrays
  if why:
    return {"error": why}
  try:
    return {**C.collapse_metrics_from_stats(means_np[i], var_np[i], counts_np, w_np[i],
                                            nc4=nc4_state, options=C.CollapseOptions(**kw)
                                            ).to_dict(), "error": ""}
  except ValueError as e:  # e.g. non-finite features of a diverged model: a NaN row
    log.warning("model %d: collapse metrics undefined: %s", i, e)
    return {"error": str(e)[:300]}
