"""Streaming accumulators for neural-collapse statistics (Wu & Papyan 2024).

Every accumulator is a ``NamedTuple`` (hence a pytree) with pure
``*_init`` / ``*_update`` functions and ``merge = leaf-wise add``, so it can be
carried through ``jax.jit``/``lax.scan``, combined across batches and hosts
(``merge`` or ``jax.lax.psum``) and vmapped over a leading checkpoint axis::

    st = jax.vmap(lambda _: mean_init(V, d))(jnp.arange(K))        # K checkpoints
    upd = jax.jit(jax.vmap(mean_update, in_axes=(0, 0, None)))
    st = upd(st, feats_KxBxd, labels_B)                             # same tokens

The three passes of the authors (``docs/metrics.md`` section 3.1):

1. :class:`MeanState` -- per-class sums, counts (via ``jax.ops.segment_sum``,
   no one-hot) and per-class sums of ||h||^2 (for the float64-only one-pass
   variance);
2. :class:`VarState` -- per-class sums of ||h - mu_c||^2 for *given* means
   (two-pass, the default), sigma_c^2 = (1/N_c) sum ||h_i - mu_c||^2 (biased
   trace of the class covariance);
3. :class:`NC4State` -- per-class hit counts of argmax_c <w_c, h> ==
   argmin_c ||h - mu_c||^2 on validation tokens, chunked over classes.

Accumulators are float32 (float64 when x64 is enabled) and counts are int32
(int64 under x64); bf16/f16/f32 features are accepted and upcast.  Labels
outside [0, V) are *dropped* by ``segment_sum`` inside jit; the convenience
:func:`sbjax.metrics.collapse_metrics` checks labels outside jit and
raises ``ValueError`` instead.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._util import acc_dtype, check_shapes, int_acc_dtype, tree_add

_HI = lax.Precision.HIGHEST


class MeanState(NamedTuple):
  """sums (V, d), counts (V,), sq_norms (V,) = per-class sum of ||h||^2."""

  sums: jax.Array
  counts: jax.Array
  sq_norms: jax.Array


class VarState(NamedTuple):
  """sq_dev (V,) = per-class sum of ||h - mu_c||^2, counts (V,)."""

  sq_dev: jax.Array
  counts: jax.Array


class NC4State(NamedTuple):
  """hits (V,) = per-class (by true label) agreements, counts (V,) = tokens seen."""

  hits: jax.Array
  counts: jax.Array


def merge(a, b):
  """Merge two accumulators of the same type (leaf-wise addition).

  Args:
    a: a :class:`MeanState`, :class:`VarState` or :class:`NC4State`.
    b: an accumulator of the same type and shapes.

  Returns:
    The accumulator of both batches, of that type.
  """
  return type(a)(*tree_add(tuple(a), tuple(b)))


def _labels(labels, valid, num_classes):
  labels = jnp.asarray(labels).astype(jnp.int32)
  if valid is not None:
    labels = jnp.where(jnp.asarray(valid, bool), labels, num_classes)  # dropped
  return labels


def mean_init(num_classes: int, dim: int, dtype=None) -> MeanState:
  """An empty :class:`MeanState`.

  Args:
    num_classes: V (static).
    dim: d (static).
    dtype: of the sums; default float32 (float64 under x64).

  Returns:
    A :class:`MeanState` of zeros: sums (V, d), counts (V,) int32 (int64 under x64),
    sq_norms (V,).
  """
  dt = dtype or acc_dtype()
  return MeanState(
      jnp.zeros((num_classes, dim), dt),
      jnp.zeros((num_classes,), int_acc_dtype()),
      jnp.zeros((num_classes,), dt),
  )


def mean_update(state: MeanState, feats, labels, valid=None) -> MeanState:
  """Add a batch to the class sums and counts.

  Args:
    state: a :class:`MeanState` of V classes and dimension d.
    feats: (B, d) features, any float dtype.
    labels: (B,) integer classes in [0, V) (others are dropped).
    valid: optional (B,) bool; False tokens are dropped.

  Returns:
    The updated :class:`MeanState`.
  """
  check_shapes("mean_update", **{"state.sums": (state.sums, "V d")}, feats=(feats, "B d"),
               labels=(labels, "B"), valid=(valid, "B"))
  v = state.sums.shape[0]
  h = jnp.asarray(feats).astype(state.sums.dtype)
  y = _labels(labels, valid, v)
  sums = jax.ops.segment_sum(h, y, num_segments=v)
  cnt = jax.ops.segment_sum(jnp.ones(y.shape, state.counts.dtype), y, num_segments=v)
  sq = jax.ops.segment_sum(jnp.sum(h * h, axis=-1), y, num_segments=v)
  return MeanState(state.sums + sums, state.counts + cnt, state.sq_norms + sq)


def class_means(state: MeanState):
  """mu_c = sums_c / N_c (zero rows for unseen classes).

  Args:
    state: a :class:`MeanState`.

  Returns:
    (means, counts): (V, d) float (the state's dtype) and (V,) integer N_c.
  """
  c = state.counts.astype(state.sums.dtype)
  return state.sums / jnp.maximum(c, 1)[..., None], state.counts


def var_init(num_classes: int, dtype=None) -> VarState:
  """An empty :class:`VarState`.

  Args:
    num_classes: V (static).
    dtype: of the sums; default float32 (float64 under x64).

  Returns:
    A :class:`VarState` of zeros: sq_dev (V,), counts (V,) int32 (int64 under x64).
  """
  dt = dtype or acc_dtype()
  return VarState(jnp.zeros((num_classes,), dt), jnp.zeros((num_classes,), int_acc_dtype()))


def var_update(state: VarState, feats, labels, means, valid=None) -> VarState:
  """Two-pass variance: add sum ||h_i - mu_{y_i}||^2 per class, for given class means.

  Args:
    state: a :class:`VarState` of V classes.
    feats: (B, d) features, any float dtype.
    labels: (B,) integer classes in [0, V) (others are dropped).
    means: (V, d) class means (:func:`class_means`).
    valid: optional (B,) bool; False tokens are dropped.

  Returns:
    The updated :class:`VarState`.
  """
  check_shapes("var_update", **{"state.sq_dev": (state.sq_dev, "V")}, means=(means, "V d"),
               feats=(feats, "B d"), labels=(labels, "B"), valid=(valid, "B"))
  v = state.sq_dev.shape[0]
  h = jnp.asarray(feats).astype(state.sq_dev.dtype)
  y = _labels(labels, valid, v)
  mu = jnp.take(jnp.asarray(means).astype(h.dtype), jnp.clip(y, 0, v - 1), axis=0)
  dev = jnp.sum(jnp.square(h - mu), axis=-1)
  sq = jax.ops.segment_sum(dev, y, num_segments=v)
  cnt = jax.ops.segment_sum(jnp.ones(y.shape, state.counts.dtype), y, num_segments=v)
  return VarState(state.sq_dev + sq, state.counts + cnt)


def class_variances(state: VarState):
  """sigma_c^2 = sq_dev_c / N_c (biased; 0 for unseen and single-token classes).

  Args:
    state: a :class:`VarState`.

  Returns:
    (V,) float array, the state's dtype.
  """
  c = state.counts.astype(state.sq_dev.dtype)
  return state.sq_dev / jnp.maximum(c, 1)


def one_pass_variances(state: MeanState):
  """One-pass sigma_c^2 = sum ||h||^2 / N_c - ||mu_c||^2, clamped at 0.

  Only allowed for float64 accumulators (x64 enabled): in float32 the
  cancellation destroys small variances.  Raises ``ValueError`` otherwise.

  Args:
    state: a float64 :class:`MeanState`.

  Returns:
    (V,) float64 array.
  """
  if state.sums.dtype != jnp.float64:
    raise ValueError(
        "one_pass_variances needs float64 accumulators (enable jax_enable_x64 before "
        "mean_init); in float32 use the two-pass var_update instead"
    )
  mu, cnt = class_means(state)
  c = jnp.maximum(cnt.astype(state.sums.dtype), 1)
  return jnp.maximum(state.sq_norms / c - jnp.sum(mu * mu, axis=-1), 0.0)


def nc4_init(num_classes: int) -> NC4State:
  """An empty :class:`NC4State`.

  Args:
    num_classes: V (static).

  Returns:
    A :class:`NC4State` of zeros: hits (V,), counts (V,), int32 (int64 under x64).
  """
  z = jnp.zeros((num_classes,), int_acc_dtype())
  return NC4State(z, z)


def _nc4_predict(h, w, means, w_valid, mean_valid, chunk_size):
  """Chunked argmax_c <w_c,h> and argmin_c ||h-mu_c||^2 over rows of w / means."""
  s, d = w.shape
  c = int(min(chunk_size, s))
  nchunk = -(-s // c)
  pad = nchunk * c - s
  dt = h.dtype
  w = jnp.pad(w.astype(dt), ((0, pad), (0, 0))).reshape(nchunk, c, d)
  mu = jnp.pad(means.astype(dt), ((0, pad), (0, 0))).reshape(nchunk, c, d)
  wv = jnp.pad(w_valid, (0, pad)).reshape(nchunk, c)
  mv = jnp.pad(mean_valid, (0, pad)).reshape(nchunk, c)
  b = h.shape[0]
  neg = jnp.array(-jnp.inf, dt)

  def body(carry, xs):
    bw, iw, bm, im = carry
    k, wc, mc, wvc, mvc = xs
    sw = jnp.where(wvc[None, :], jnp.matmul(h, wc.T, precision=_HI), neg)
    # argmin ||h - mu||^2 == argmax (<h, mu> - ||mu||^2 / 2)
    sm = jnp.matmul(h, mc.T, precision=_HI) - 0.5 * jnp.sum(mc * mc, axis=-1)[None, :]
    sm = jnp.where(mvc[None, :], sm, neg)
    aw, am = jnp.argmax(sw, axis=1).astype(jnp.int32), jnp.argmax(sm, axis=1).astype(jnp.int32)
    vw, vm = jnp.take_along_axis(sw, aw[:, None], 1)[:, 0], jnp.take_along_axis(sm, am[:, None], 1)[:, 0]
    uw, um = vw > bw, vm > bm  # strict: keep the first index on ties (like argmax)
    carry = (
        jnp.where(uw, vw, bw),
        jnp.where(uw, aw + k * c, iw),
        jnp.where(um, vm, bm),
        jnp.where(um, am + k * c, im),
    )
    return carry, None

  init = (jnp.full((b,), -jnp.inf, dt), jnp.zeros((b,), jnp.int32), jnp.full((b,), -jnp.inf, dt),
          jnp.zeros((b,), jnp.int32))
  (_, iw, _, im), _ = lax.scan(body, init, (jnp.arange(nchunk, dtype=jnp.int32), w, mu, wv, mv))
  return iw, im


def nc4_update(
    state: NC4State, feats, labels, w, means, *, w_valid=None, mean_valid=None, valid=None,
    chunk_size: int = 4096, token_chunk: int = 8192,
) -> NC4State:
  """Add NC4 hits of a validation batch: a hit is argmax_s <w_s, h> == argmin_s ||h - mu_s||^2.

  The search is chunked over S (``chunk_size`` classes at a time) and over tokens
  (``token_chunk`` at a time), so the score matrices are O(token_chunk * chunk_size),
  never O(B * S).

  Args:
    state: an :class:`NC4State` of V classes.
    feats: (B, d) validation features, any float dtype.
    labels: (B,) integer classes in [0, V): only which per-class counter a token goes to
      (for the weighted/unweighted agreement); they do not enter the hit test.
    w: (S, d) head rows of the search set.
    means: (S, d) class means of the *same* S classes (:func:`nc4_search_set`).
    w_valid: optional (S,) bool, restricts the linear classifier's search.
    mean_valid: optional (S,) bool, restricts the nearest-centre search (e.g. to classes
      that have a mean).
    valid: optional (B,) bool; False tokens are dropped.
    chunk_size: classes per chunk (static).
    token_chunk: tokens per chunk (static).

  Returns:
    The updated :class:`NC4State`.
  """
  check_shapes("nc4_update", **{"state.hits": (state.hits, "V")}, feats=(feats, "B d"),
               labels=(labels, "B"), w=(w, "S d"), means=(means, "S d"), w_valid=(w_valid, "S"),
               mean_valid=(mean_valid, "S"), valid=(valid, "B"))
  v = state.hits.shape[0]
  h = jnp.asarray(feats).astype(acc_dtype())
  s = w.shape[0]
  w_valid = jnp.ones((s,), bool) if w_valid is None else jnp.asarray(w_valid, bool)
  mean_valid = jnp.ones((s,), bool) if mean_valid is None else jnp.asarray(mean_valid, bool)
  w, means = jnp.asarray(w), jnp.asarray(means)
  b = h.shape[0]
  tb = int(min(token_chunk, b))
  nt = -(-b // tb)
  hp = jnp.pad(h, ((0, nt * tb - b), (0, 0))).reshape(nt, tb, h.shape[1])
  iw, im = lax.map(lambda hb: _nc4_predict(hb, w, means, w_valid, mean_valid, chunk_size), hp)
  iw, im = iw.reshape(-1)[:b], im.reshape(-1)[:b]
  y = _labels(labels, valid, v)
  hit = (iw == im).astype(state.hits.dtype)
  return NC4State(
      state.hits + jax.ops.segment_sum(hit, y, num_segments=v),
      state.counts + jax.ops.segment_sum(jnp.ones(y.shape, state.counts.dtype), y, num_segments=v),
  )


def nc4_agreement(state: NC4State, weighted: bool = True):
  """NC4 agreement rate.

  Args:
    state: an :class:`NC4State`.
    weighted: ``True`` (default, the authors' ``clf_ncc_agreement`` default): total hits /
      total tokens.  ``False``: mean over classes with at least one validation token of
      hits_c / N_c.

  Returns:
    Scalar in [0, 1], float32 (float64 under x64).
  """
  hits = state.hits.astype(acc_dtype())
  cnt = state.counts.astype(acc_dtype())
  if weighted:
    return jnp.sum(hits) / jnp.maximum(jnp.sum(cnt), 1)
  seen = cnt > 0
  rate = jnp.where(seen, hits / jnp.maximum(cnt, 1), 0.0)
  return jnp.sum(rate) / jnp.maximum(jnp.sum(seen), 1)
