"""Streaming accumulators of the authors' three passes over tokens (``docs/metrics.md`` section
3.1): class means (:class:`MeanState`), two-pass class variances (:class:`VarState`) and NC4
hits on validation tokens (:class:`NC4State`).

Each is a NamedTuple (a pytree) with pure ``*_init`` / ``*_update`` functions that merge by
addition (:func:`merge`, or ``jax.lax.psum`` across hosts) and vmap over a leading checkpoint
axis. Sums are float32 (float64 under x64), counts int32 (int64 under x64); features of any
float dtype are upcast. Labels outside [0, V) are dropped (``jax.ops.segment_sum``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._util import acc_dtype, check_shapes, int_acc_dtype

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
  return jax.tree_util.tree_map(jnp.add, a, b)


def _labels(labels, valid, num_classes):
  labels = jnp.asarray(labels).astype(jnp.int32)
  if valid is not None:
    labels = jnp.where(jnp.asarray(valid, bool), labels, num_classes)  # dropped
  return labels


def mean_init(num_classes: int, dim: int) -> MeanState:
  """An empty :class:`MeanState`.

  Args:
    num_classes: V (static).
    dim: d (static).

  Returns:
    A :class:`MeanState` of zeros: sums (V, d) and sq_norms (V,) float32 (float64 under x64),
    counts (V,) int32 (int64 under x64).
  """
  dt = acc_dtype()
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


def var_init(num_classes: int) -> VarState:
  """An empty :class:`VarState`.

  Args:
    num_classes: V (static).

  Returns:
    A :class:`VarState` of zeros: sq_dev (V,) float32 (float64 under x64), counts (V,) int32
    (int64 under x64).
  """
  return VarState(jnp.zeros((num_classes,), acc_dtype()), jnp.zeros((num_classes,), int_acc_dtype()))


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
  """One-pass sigma_c^2 = sum ||h||^2 / N_c - ||mu_c||^2, clamped at 0; float64 only (in float32
  the cancellation destroys small variances: ``ValueError``).

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


def _chunked_argmax(h, rows, valid, chunk_size, score):
  """argmax over the valid rows r of score(h, r) for each token of h, ``chunk_size`` rows at a
  time with a running best (the first index on ties, like argmax)."""
  s, d = rows.shape
  c = int(min(chunk_size, s))
  nchunk = -(-s // c)
  rows = jnp.pad(rows.astype(h.dtype), ((0, nchunk * c - s), (0, 0))).reshape(nchunk, c, d)
  valid = jnp.pad(valid, (0, nchunk * c - s)).reshape(nchunk, c)

  def body(carry, xs):
    best, idx = carry
    k, rc, vc = xs
    sc = jnp.where(vc[None, :], score(h, rc), -jnp.inf)
    a = jnp.argmax(sc, axis=1).astype(jnp.int32)
    val = jnp.take_along_axis(sc, a[:, None], 1)[:, 0]
    up = val > best  # strict: an earlier chunk wins a tie
    return (jnp.where(up, val, best), jnp.where(up, a + k * c, idx)), None

  init = (jnp.full((h.shape[0],), -jnp.inf, h.dtype), jnp.zeros((h.shape[0],), jnp.int32))
  return lax.scan(body, init, (jnp.arange(nchunk, dtype=jnp.int32), rows, valid))[0][1]


def _inner(h, r):
  return jnp.matmul(h, r.T, precision=_HI)


def _neg_half_dist(h, r):
  """<h, mu> - ||mu||^2 / 2: its argmax is argmin ||h - mu||^2."""
  return jnp.matmul(h, r.T, precision=_HI) - 0.5 * jnp.sum(r * r, axis=-1)[None, :]


def nc4_update(
    state: NC4State, feats, labels, w, means, *, w_valid=None, mean_valid=None, valid=None,
    chunk_size: int = 4096, token_chunk: int = 8192,
) -> NC4State:
  """Add NC4 hits of a validation batch: a hit is argmax_s <w_s, h> == argmin_s ||h - mu_s||^2,
  searched ``chunk_size`` classes and ``token_chunk`` tokens at a time (never B x S scores).

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
  iw, im = lax.map(lambda hb: (_chunked_argmax(hb, w, w_valid, chunk_size, _inner),
                               _chunked_argmax(hb, means, mean_valid, chunk_size, _neg_half_dist)), hp)
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
