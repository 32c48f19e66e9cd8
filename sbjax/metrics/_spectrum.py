"""Functions of one singular-value spectrum (Godey et al. 2024; Diehl Martinez et al. 2024;
``docs/metrics.md`` section 1), each composing with ``jax.vmap`` over checkpoints or heads::

  s = jax.jit(jax.vmap(singular_values))(heads_HxVxd)      # (H, min(V, d))
  m = jax.vmap(spectrum_metrics)(s)                          # SpectrumMetrics of (H,) arrays

``s`` is (n,) singular values, descending, >= 0 (as :func:`singular_values` returns them), and
p_i = s_i / sum_j s_j (an L1 normalisation of sigma, not sigma^2); natural logs; 0 log 0 = 0.
A zero spectrum gives KL = log n, erank = PER = stable rank = W-error = 0, condition number
inf: nothing is NaN. Results are float32 (float64 for a float64 spectrum under x64).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._singular_values import raw_and_centred_singular_values
from ._util import at_least_f32, check_shapes, xlogx_safe


def _p(s):
  s = at_least_f32(s)
  s = jnp.maximum(s, 0.0)
  tot = jnp.sum(s)
  p = jnp.where(tot > 0, s / jnp.where(tot > 0, tot, 1.0), 0.0)
  return p, tot


def singular_entropy(s):
  """H(p) = -sum_i p_i log p_i with p = s / sum(s); p_i = 0 contributes 0.

  Args:
    s: (n,) singular values, descending, >= 0.

  Returns:
    Scalar; 0 for a zero spectrum.
  """
  check_shapes("singular_entropy", s=(s, "n"))
  p, _ = _p(s)
  return -jnp.sum(xlogx_safe(p))


def kl_to_uniform(s):
  """KL(p || u) = sum_i p_i log(n p_i) = log n - H(p) (Godey et al. 2024, Fig. 5): 0 for all
  sigma equal, log n for rank 1 and for a zero spectrum.

  Args:
    s: (n,) singular values, descending, >= 0.

  Returns:
    Scalar in [0, log n].
  """
  check_shapes("kl_to_uniform", s=(s, "n"))
  return math.log(jnp.shape(s)[-1]) - singular_entropy(s)


def effective_rank(s):
  """erank = exp(H(p)) (Roy & Vetterli 2007).

  Args:
    s: (n,) singular values, descending, >= 0.

  Returns:
    Scalar in [1, n]: 1 for rank 1, n for all-equal sigma; 0 for a zero spectrum.
  """
  check_shapes("effective_rank", s=(s, "n"))
  _, tot = _p(s)
  return jnp.where(tot > 0, jnp.exp(singular_entropy(s)), 0.0)


def proportional_effective_rank(s, r: int | None = None):
  """PER = erank / r (Diehl Martinez et al. 2024).

  Args:
    s: (n,) singular values, descending, >= 0.
    r: ``None`` (default, pico-analyze / current code): r = n and the erank of the whole
      spectrum.  A static Python int (the authors' notebook, r = head_dim), 1 <= r <= n:
      only the top r values s[:r] (renormalised), PER = erank(s[:r]) / r.

  Returns:
    Scalar in [0, 1].
  """
  n = check_shapes("proportional_effective_rank", s=(s, "n"))["n"]
  if r is None:
    return effective_rank(s) / n
  r = int(r)
  if not 1 <= r <= n:
    raise ValueError(f"proportional_effective_rank: r={r} must be in [1, len(s)={n}]")
  return effective_rank(s[:r]) / r


def w_error(s, d):
  """W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||W||_F (Godey et al. 2024, Sec. 5.1): the relative
  Frobenius error of the best rank-d approximation, tail sums accumulated from the small end.

  Args:
    s: (n,) singular values, descending, >= 0.
    d: a Python int or an integer array of any shape; clipped to [0, n] (d >= n gives 0,
      d = 0 gives 1).

  Returns:
    An array of d's shape; 0 for a zero matrix.
  """
  check_shapes("w_error", s=(s, "n"))
  s = at_least_f32(s)
  s2 = jnp.square(jnp.maximum(s, 0.0))
  n = s2.shape[-1]
  # tail[k] = sum_{i >= k} s2[i] (0-indexed), tail[n] = 0
  tail = jnp.concatenate([jnp.cumsum(s2[::-1])[::-1], jnp.zeros((1,), s2.dtype)])
  total = tail[0]
  d = jnp.clip(jnp.asarray(d).astype(jnp.int32), 0, n)
  t = tail[d]
  return jnp.where(total > 0, jnp.sqrt(t / jnp.where(total > 0, total, 1.0)), 0.0)


def stable_rank(s):
  """Stable rank ||W||_F^2 / sigma_1^2 = sum_i sigma_i^2 / sigma_1^2.

  Args:
    s: (n,) singular values, descending, >= 0.

  Returns:
    Scalar in [1, n]; 0 for a zero matrix.
  """
  check_shapes("stable_rank", s=(s, "n"))
  s = at_least_f32(s)
  s1 = jnp.max(s)
  return jnp.where(s1 > 0, jnp.sum(jnp.square(s)) / jnp.where(s1 > 0, s1 * s1, 1.0), 0.0)


def condition_number(s):
  """sigma_1 / sigma_n with sigma_n the smallest value in ``s`` (above ~1e3 it needs a
  ``"gram64"`` or ``"svd"`` spectrum: :func:`singular_values`).

  Args:
    s: (n,) singular values, descending, >= 0.

  Returns:
    Scalar >= 1; +inf when sigma_n = 0 and for a zero matrix.
  """
  check_shapes("condition_number", s=(s, "n"))
  s = at_least_f32(s)
  s1 = jnp.max(s)
  sn = jnp.min(s)
  bad = (sn <= 0) | (s1 <= 0)
  return jnp.where(bad, jnp.inf, s1 / jnp.where(bad, 1.0, sn))


def normalized_top(s, k: int = 100):
  """sigma_i / sigma_1 for the top k (Godey et al. 2024, Fig. 4 heat-map).

  Args:
    s: (n,) singular values, descending, >= 0.
    k: static length of the result.

  Returns:
    (k,) array, NaN past n (no padded entry can pass for a value); zeros for a zero matrix.
  """
  check_shapes("normalized_top", s=(s, "n"))
  s = at_least_f32(s)
  n = s.shape[-1]
  s1 = s[0]
  top = jnp.where(s1 > 0, s[: min(k, n)] / jnp.where(s1 > 0, s1, 1.0), 0.0)
  if n < k:
    top = jnp.concatenate([top, jnp.full((k - n,), jnp.nan, top.dtype)])
  return top


class SpectrumMetrics(NamedTuple):
  """Every metric of one spectrum (:func:`spectrum_metrics`); scalars unless noted, with a
  leading axis per ``jax.vmap``."""

  kl_to_uniform: jax.Array
  singular_entropy: jax.Array
  effective_rank: jax.Array
  proportional_effective_rank: jax.Array
  stable_rank: jax.Array
  condition_number: jax.Array
  normalized_top: jax.Array  # (k,)
  w_error: jax.Array | None = None  # d's shape; None without d


def spectrum_metrics(s, d=None, r: int | None = None, k: int = 100) -> SpectrumMetrics:
  """Every metric of one spectrum, in one call (jit- and vmap-able).

  Args:
    s: (n,) singular values, descending, >= 0 (:func:`singular_values`).
    d: optional int or integer array: the ranks of ``w_error``.
    r: the r of :func:`proportional_effective_rank` (static).
    k: the length of :func:`normalized_top` (static).

  Returns:
    A :class:`SpectrumMetrics`: float32 scalars (float64 under x64), ``normalized_top``
    (k,), ``w_error`` of d's shape (None without d).
  """
  return SpectrumMetrics(
      kl_to_uniform=kl_to_uniform(s), singular_entropy=singular_entropy(s),
      effective_rank=effective_rank(s), proportional_effective_rank=proportional_effective_rank(s, r),
      stable_rank=stable_rank(s), condition_number=condition_number(s), normalized_top=normalized_top(s, k),
      w_error=None if d is None else w_error(s, d))


class HeadSpectra(NamedTuple):
  """:func:`spectrum_metrics` of sigma(W) (``raw``) and of sigma((I - 11^T/V) W) (``centred``)."""

  raw: SpectrumMetrics
  centred: SpectrumMetrics


def head_spectra(w, d=None, method: str = "auto") -> HeadSpectra:
  """:func:`spectrum_metrics` of sigma(W) and of sigma((I - 11^T/V) W) (jit- and vmap-able).

  Args:
    w: (V, d) head, any float dtype.
    d: optional int or integer array: the ranks of ``w_error``.
    method: as :func:`singular_values`.

  Returns:
    A :class:`HeadSpectra` of two :class:`SpectrumMetrics` (float32, float64 under x64).
  """
  both = raw_and_centred_singular_values(w, method)
  return HeadSpectra(raw=spectrum_metrics(both[0], d), centred=spectrum_metrics(both[1], d))
