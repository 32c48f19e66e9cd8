"""Host wrappers of the neural-collapse statistics: checks of concrete inputs, one call of the
jitted pure function, Python numbers out (under ``jax.jit`` they name the pure function)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._accumulators import NC4State
from ._collapse_types import CollapseOptions, CollapseStats
from ._neural_collapse import _check_stats, check_features, jit_features_aux, jit_stats_aux
from ._util import host_only

_DEFAULT = CollapseOptions()
_PER_CLASS = ("class_analyzed", "per_class_cdnv", "per_class_interference")


def analyzed_classes(counts, min_count: int = 1) -> np.ndarray:
  """Indices of the classes with N_c >= min_count (concrete, on the host).

  Args:
    counts: (V,) integer N_c.
    min_count: >= 1.

  Returns:
    (K,) int64 numpy array of class indices.  Raises ``ValueError`` if fewer than 2 classes
    qualify.
  """
  counts = np.asarray(counts)
  idx = np.flatnonzero(counts >= min_count)
  if idx.size < 2:
    raise ValueError(
        f"neural-collapse metrics need at least 2 analysed classes, but only {idx.size} "
        f"class(es) have >= min_count={min_count} tokens (out of {counts.size}); "
        "lower min_count or accumulate more tokens"
    )
  return idx


def nc4_search_set(means, counts, w, *, min_count: int = 1, search: str = "analyzed"):
  """The search set of ``nc4_update`` (concrete, on the host).

  Args:
    means: (V, d) class means.
    counts: (V,) integer N_c.
    w: (V, d) LM head.
    min_count: the analysed classes' N_c >= min_count.
    search: ``"analyzed"`` (default, paper-era): both searches over the analysed classes;
      ``"all"`` (current code): the linear classifier over all V rows of W, the NCC over
      every class with N_c > 0.

  Returns:
    (w_rows (S, d), mean_rows (S, d), w_valid (S,) bool, mean_valid (S,) bool).
  """
  counts = np.asarray(counts)
  if search == "analyzed":
    idx = analyzed_classes(counts, min_count)
    ones = jnp.ones((idx.size,), bool)
    return jnp.asarray(w)[idx], jnp.asarray(means)[idx], ones, ones
  if search == "all":
    v = counts.shape[0]
    return jnp.asarray(w), jnp.asarray(means), jnp.ones((v,), bool), jnp.asarray(counts > 0)
  raise ValueError(f"nc4_search must be 'analyzed' or 'all', got {search!r}")


def check_finite(name, x):
  x = np.asarray(x)
  if not np.all(np.isfinite(x)):
    bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
    raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN/inf); clean the input before computing "
                     "collapse metrics")


def check_labels(name, feats, labels, v):
  """Integer labels in [0, V) and finite features of one token set (host side)."""
  if labels.size and (labels.min() < 0 or labels.max() >= v):
    raise ValueError(f"{name} labels must lie in [0, V={v}); found values in [{labels.min()}, {labels.max()}]")
  check_finite(f"{name} features", np.asarray(feats, np.float32) if feats.dtype.itemsize < 4 else feats)


def to_host(out: CollapseStats, max_norm, idx) -> CollapseStats:
  """The statistics as Python floats/ints (per-class arrays as numpy)."""
  out, max_norm = jax.device_get((out, max_norm))
  if float(max_norm) == 0.0:
    raise ValueError("all analysed class means are identical (every centred mean is zero); collapse metrics are "
                     "undefined")
  res = {key: (x if key in _PER_CLASS else int(x) if np.issubdtype(np.asarray(x).dtype, np.integer) else float(x))
         for key, x in out.to_dict().items()}
  k = int(idx.size)
  res["nc1_n_pairs"] = k * (k - 1) // 2  # exact (the kernel's integer wraps beyond ~65k classes without x64)
  res["gnc2_riesz_mean"] = float(np.exp(np.float64(res["gnc2_riesz_log_mean"])))  # +inf only beyond ~1.8e308
  return out._replace(**res)


def collapse_metrics_from_stats(means, variances, counts, w, *, nc4: NC4State | None = None,
                                options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """:func:`neural_collapse_from_stats` with host checks, as Python numbers.

  Args:
    means: (V, d) class means, variances: (V,) sigma_c^2 (biased), counts: (V,) N_c,
    w: (V, d) LM head: concrete arrays (numpy or jax).
    nc4: optional :class:`NC4State` accumulated on validation tokens with ``nc4_update``
      (``nc4_search_set`` gives the search set); adds ``nc4_agreement``.
    options: a :class:`CollapseOptions` (``min_count`` and the statistics' variants).

  Returns:
    A :class:`CollapseStats` of Python floats and ints (``nc1_n_pairs`` exact,
    ``gnc2_riesz_mean`` the float64 exp of the log mean), numpy (V,) per-class arrays with
    ``options.per_class``.  Raises ``ValueError`` for non-finite analysed statistics, fewer
    than 2 analysed classes or identical class means.
  """
  host_only("collapse_metrics_from_stats", "neural_collapse_from_stats", means, variances, counts, w)
  _check_stats("collapse_metrics_from_stats", means, variances, counts, w)
  counts = np.asarray(counts)
  means, variances, w = np.asarray(means), np.asarray(variances), np.asarray(w)
  idx = analyzed_classes(counts, options.min_count)
  check_finite("class means", means[idx])
  check_finite("class variances", variances[idx])
  check_finite("W (analysed rows)", w[idx])
  return to_host(*jit_stats_aux(means, variances, counts, w, nc4, opts=options), idx)


def collapse_metrics(feats, labels, w, val_feats=None, val_labels=None, *,
                     options: CollapseOptions = _DEFAULT) -> CollapseStats:
  """:func:`neural_collapse` of concrete arrays with host checks, as Python numbers.

  Args:
    feats: (N, d) features, labels: (N,) integer classes in [0, V), w: (V, d) LM head.
    val_feats: optional (M, d), val_labels: optional (M,): add ``nc4_agreement`` (search
      set per ``options.nc4_search``).
    options: a :class:`CollapseOptions`.

  Returns:
    A :class:`CollapseStats` as :func:`collapse_metrics_from_stats` returns it.  Raises
    ``ValueError`` for labels outside [0, V), non-finite features or analysed rows of W,
    fewer than 2 analysed classes, identical class means, and wrong shapes.
  """
  host_only("collapse_metrics", "neural_collapse", feats, labels, w, val_feats, val_labels)
  check_features("collapse_metrics", feats, labels, w, val_feats, val_labels)
  feats_np, labels_np, w_np = np.asarray(feats), np.asarray(labels), np.asarray(w)
  v = w_np.shape[0]
  check_labels("train", feats_np, labels_np, v)
  idx = analyzed_classes(np.bincount(labels_np, minlength=v), options.min_count)  # early, clear error
  check_finite("W (analysed rows)", w_np[idx])
  if val_feats is not None:
    val_feats, val_labels = np.asarray(val_feats), np.asarray(val_labels)
    check_labels("validation", val_feats, val_labels, v)
  return to_host(*jit_features_aux(feats_np, labels_np, w_np, val_feats, val_labels, None, None, opts=options), idx)
