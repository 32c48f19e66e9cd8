"""Neural collapse NC1-NC4 of one checkpoint (Wu & Papyan 2024), pure and traceable. The
number of classes is static (V = ``w.shape[0]``) and the analysed classes (N_c >=
``min_count``) are a mask, so nothing depends on concrete values: where a statistic is
undefined (fewer than 2 analysed classes, every class mean identical) its floating fields are
NaN, and labels outside [0, V) are dropped (``docs/metrics.md`` section 3.7)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ._accumulators import (
    NC4State, class_means, class_variances, mean_init, mean_update, nc4_agreement, nc4_init, nc4_update,
    one_pass_variances, var_init, var_update,
)
from ._collapse_core import core
from ._collapse_types import CollapseOptions, CollapseStats
from ._util import acc_dtype, check_shapes

_DEFAULT = CollapseOptions()


def stats_aux(means, variances, counts, w, nc4: NC4State | None, opts: CollapseOptions):
  """(CollapseStats, max ||mu~_c||) from accumulated statistics (the host wrappers refuse a
  zero maximum: every class mean identical)."""
  dt = acc_dtype()
  v = w.shape[0]
  cnt = jnp.asarray(counts)
  valid = cnt >= opts.min_count
  rtol = float(opts.coincide_rtol) if opts.coincide_rtol is not None else 8.0 * float(jnp.finfo(dt).eps)
  out, max_norm = core(
      jnp.asarray(means).astype(dt), jnp.asarray(variances).astype(dt), jnp.asarray(w).astype(dt),
      cnt.astype(dt), valid, jnp.sum(valid.astype(jnp.int32)), weighted_mean=bool(opts.weighted_mean),
      norm_variant=opts.norm_variant, ddof=int(opts.ddof), block=int(min(opts.block_size, -(-v // 8) * 8)),
      cdnv_exponent=float(opts.cdnv_exponent), angle_variant=opts.angle_variant,
      gnc2_centered=bool(opts.gnc2_centered), coincide_rtol=rtol, riesz_s=float(opts.riesz_s),
      per_class=bool(opts.per_class))
  nc4 = None if nc4 is None else nc4_agreement(nc4, weighted=bool(opts.nc4_weighted))
  return CollapseStats(**{**dict.fromkeys(CollapseStats._fields), **out, "nc4_agreement": nc4,
                          "class_analyzed": valid if opts.per_class else None}), max_norm


def _check_stats(fn, means, variances, counts, w):
  check_shapes(fn, means=(means, "V d"), variances=(variances, "V"), counts=(counts, "V"), w=(w, "V d"))


def neural_collapse_from_stats(means, variances, counts, w, nc4: NC4State | None = None, *,
                               options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """NC1-NC4 of one checkpoint from its accumulated statistics (pure: jit- and vmap-able).

  Args:
    means: (V, d) class means (``class_means``), any float dtype.
    variances: (V,) sigma_c^2, the biased trace (``class_variances``).
    counts: (V,) integer N_c; the analysed classes are N_c >= ``options.min_count``.
    w: (V, d) LM head.
    nc4: optional :class:`NC4State` (its search set chosen by the caller, e.g.
      ``nc4_search_set``); adds ``nc4_agreement``.
    options: a :class:`CollapseOptions` (static).

  Returns:
    A :class:`CollapseStats` of jax scalars (float32, or float64 under x64; the counts
    integers); NaN where undefined.
  """
  _check_stats("neural_collapse_from_stats", means, variances, counts, w)
  return stats_aux(means, variances, counts, w, nc4, options)[0]


def token_scan(step, state, feats, labels, mask, batch_size: int):
  """Fold ``step(state, h, y, m)`` over token batches of static size (no padded copy: the
  last batch is shifted back and masks the tokens already seen)."""
  n = feats.shape[0]
  if n < 1:
    raise ValueError("collapse statistics need at least one token (got N = 0)")
  bs = int(min(batch_size, n))
  mask = jnp.ones((n,), bool) if mask is None else jnp.asarray(mask, bool)
  ar = jnp.arange(bs)

  def body(st, i):
    s = jnp.minimum(i * bs, n - bs)
    m = lax.dynamic_slice_in_dim(mask, s, bs) & (s + ar >= i * bs)
    h, y = (lax.dynamic_slice_in_dim(x, s, bs) for x in (feats, labels))
    return step(st, h, y, m), None

  return lax.scan(body, state, jnp.arange(-(-n // bs)))[0]


def features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, opts: CollapseOptions):
  """(CollapseStats, max ||mu~_c||) of :func:`neural_collapse`."""
  v, d = w.shape
  feats, labels = jnp.asarray(feats), jnp.asarray(labels)
  st = token_scan(mean_update, mean_init(v, d), feats, labels, mask, opts.batch_size)
  means, counts = class_means(st)
  if opts.variance == "one_pass":
    variances = one_pass_variances(st)
  else:
    vs = token_scan(lambda s, h, y, m: var_update(s, h, y, means, m), var_init(v), feats, labels, mask,
                    opts.batch_size)
    variances = class_variances(vs)
  nc4 = None
  if val_feats is not None:
    analysed = counts >= opts.min_count
    wv, mv = (analysed, analysed) if opts.nc4_search == "analyzed" else (jnp.ones((v,), bool), counts > 0)
    nc4 = nc4_update(nc4_init(v), val_feats, val_labels, w, means, w_valid=wv, mean_valid=mv,
                     valid=val_mask, chunk_size=opts.nc4_chunk_size)
  return stats_aux(means, variances, counts, w, nc4, opts)


def check_features(fn, feats, labels, w, val_feats, val_labels, mask=None, val_mask=None):
  """Shapes (features first, so a transposed head is blamed, not the features) and integer
  labels, at trace time."""
  check_shapes(fn, feats=(feats, "N d"), labels=(labels, "N"), w=(w, "V d"), mask=(mask, "N"),
               val_feats=(val_feats, "M d"), val_labels=(val_labels, "M"), val_mask=(val_mask, "M"))
  if (val_feats is None) != (val_labels is None):
    raise ValueError(f"{fn}: give both val_feats and val_labels, or neither")
  for name, y in (("labels", labels), ("val_labels", val_labels)):
    if y is not None and not jnp.issubdtype(jnp.result_type(y), jnp.integer):
      raise ValueError(f"{fn}: {name} has dtype {jnp.result_type(y)}, expected an integer dtype")


def neural_collapse(feats, labels, w, val_feats=None, val_labels=None, *, mask=None, val_mask=None,
                    options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """NC1-NC4 of one checkpoint from its features (pure: jit- and vmap-able).

  The authors' three passes (class means, two-pass variances, NC4 hits on validation tokens)
  stream the tokens in ``options.batch_size`` batches; then :func:`neural_collapse_from_stats`.

  Args:
    feats: (N, d) last-layer features, any float dtype (bf16 upcast).
    labels: (N,) integer classes (next tokens) in [0, V); others are dropped.
    w: (V, d) LM head (rows = classes).
    val_feats: optional (M, d) validation features; with ``val_labels`` they add
      ``nc4_agreement``.
    val_labels: optional (M,) integer classes.
    mask: optional (N,) bool; False tokens are dropped (padding, a class missing in one
      checkpoint).
    val_mask: optional (M,) bool.
    options: a :class:`CollapseOptions` (static).

  Returns:
    A :class:`CollapseStats` of jax scalars (float32, or float64 under x64; the counts
    integers); NaN where undefined.
  """
  check_features("neural_collapse", feats, labels, w, val_feats, val_labels, mask, val_mask)
  return features_aux(feats, labels, w, val_feats, val_labels, mask, val_mask, options)[0]


jit_stats_aux = jax.jit(stats_aux, static_argnames=("opts",))
jit_features_aux = jax.jit(features_aux, static_argnames=("opts",))
