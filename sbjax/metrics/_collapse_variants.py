"""The variants that correct or guard the plain collapse estimators: bias-corrected class-mean
norms (NC2) and the guarded UNC3 (``docs/metrics.md`` sections 3.3 and 3.5)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._util import check_shapes, mean_std, moments


class CorrectedNorms(NamedTuple):
  """sq_norms (K,): max(||mu^_c - mu^_G||^2 - b_c, 0) (0 where not valid); raw_sq_norms (K,):
  ||mu^_c - mu^_G||^2 with mu^_G over the same classes; valid (K,) bool: analysed classes with
  N_c >= 2; n_valid, n_clipped: int32 scalars."""

  sq_norms: jax.Array
  raw_sq_norms: jax.Array
  valid: jax.Array
  n_valid: jax.Array
  n_clipped: jax.Array


class Unc3(NamedTuple):
  """value: std/mean of cos_c, NaN where ill-conditioned; raw: std/mean unguarded (+inf at a
  zero mean); cos_mean; cos_se = std / sqrt(K); ill_conditioned: |cos_mean| < n_se cos_se."""

  value: jax.Array
  raw: jax.Array
  cos_mean: jax.Array
  cos_se: jax.Array
  ill_conditioned: jax.Array


def corrected_sq_norms(means_KxD, variances_K, counts_K, valid_K=None, *,
                       weighted_mean: bool = False) -> CorrectedNorms:
  """Squared norms of the centred class means, less their expected bias from finite samples.

  E ||mu^_c - mu^_G||^2 = ||mu_c - mu_G||^2 + b_c, b_c = (1 - 2 a_c) s_c + sum_c' a_c'^2 s_c',
  s_c = sigma^_c^2 / N_c with the unbiased class variance sigma^_c^2 (the biased trace times
  N_c / (N_c - 1)), mu^_G = sum_c a_c mu^_c (a_c = 1/K, or N_c / sum N token-weighted) over the
  classes with N_c >= 2. The corrected value is clipped at 0 (it removes the count-driven bias,
  not the noise of each norm).

  Args:
    means_KxD: (K, d) class means mu^_c, float.
    variances_K: (K,) the *biased* trace sigma_c^2 = (1/N_c) sum ||h_i - mu^_c||^2 (as
      ``class_variances`` returns it).
    counts_K: (K,) N_c; rows with N_c < 2 are dropped.
    valid_K: optional (K,) bool, which rows are analysed classes (default: all).
    weighted_mean: static; mu^_G token-weighted instead of unweighted.

  Returns:
    A :class:`CorrectedNorms` (the means' float dtype; counts int32).
  """
  check_shapes("corrected_sq_norms", means_KxD=(means_KxD, "K d"), variances_K=(variances_K, "K"),
               counts_K=(counts_K, "K"), valid_K=(valid_K, "K"))
  mu = jnp.asarray(means_KxD)
  dt = mu.dtype
  cnt = jnp.asarray(counts_K).astype(dt)
  var = jnp.asarray(variances_K).astype(dt)
  ok = cnt >= 2 if valid_K is None else jnp.asarray(valid_K, bool) & (cnt >= 2)
  okf = ok.astype(dt)
  a = cnt * okf if weighted_mean else okf
  a = a / jnp.maximum(jnp.sum(a), 1e-30)
  mu_g = jnp.sum(mu * a[:, None], axis=0)
  mt = jnp.where(ok[:, None], mu - mu_g, 0.0)
  raw = jnp.sum(mt * mt, axis=1)
  s = jnp.where(ok, var / jnp.maximum(cnt - 1.0, 1.0), 0.0)  # sigma^2_unbiased / N_c
  bias = jnp.where(ok, (1.0 - 2.0 * a) * s + jnp.sum(a * a * s), 0.0)
  corr = raw - bias
  return CorrectedNorms(jnp.where(ok, jnp.maximum(corr, 0.0), 0.0), raw, ok,
                        jnp.sum(ok.astype(jnp.int32)), jnp.sum((ok & (corr < 0)).astype(jnp.int32)))


def norm_cov(sq_norms, valid, *, variant: str = "norm", ddof: int = 1):
  """std(x) / mean(x) over the valid classes, x = sqrt(sq_norms) ("norm") or sq_norms
  ("squared"); NaN with fewer than ddof + 1 classes or a zero mean."""
  sq = jnp.asarray(sq_norms)
  x = jnp.sqrt(jnp.maximum(sq, 0.0)) if variant == "norm" else sq
  mean, std, n = mean_std(moments(x, jnp.asarray(valid, bool)), ddof)
  ok = (n > ddof) & (mean != 0)
  return jnp.where(ok, std / jnp.where(mean != 0, mean, 1.0), jnp.nan)


def unc3_guarded(cos_K, valid_K, *, ddof: int = 1, n_se: float = 3.0) -> Unc3:
  """UNC3 = std(cos_c)/mean(cos_c) over the valid classes, NaN when |mean| < n_se * SE (the sign
  of the mean is not resolved).

  Args:
    cos_K: (K,) cos(w_c, mu~_c), float.
    valid_K: (K,) bool.
    ddof: static; of the standard deviation.
    n_se: the guard, in standard errors SE = std / sqrt(K).

  Returns:
    An :class:`Unc3` of scalars of cos_K's dtype (``ill_conditioned`` bool).
  """
  check_shapes("unc3_guarded", cos_K=(cos_K, "K"), valid_K=(valid_K, "K"))
  mean, std, n = mean_std(moments(jnp.asarray(cos_K), jnp.asarray(valid_K, bool)), ddof)
  se = std / jnp.sqrt(jnp.maximum(n, 1.0))
  raw = jnp.where(mean != 0, std / jnp.where(mean != 0, mean, 1.0), jnp.inf)
  bad = (jnp.abs(mean) < n_se * se) | (mean == 0)
  return Unc3(jnp.where(bad, jnp.nan, raw), raw, mean, se, bad)


def unc3_reason(cos_mean: float, cos_se: float, n_se: float = 3.0) -> str:
  """Why the guarded UNC3 is NaN: a host-side string for reports.

  Args:
    cos_mean: mean cos(w_c, mu~_c) (``nc3_cos_mean``).
    cos_se: its standard error (``nc3_cos_se``).
    n_se: the guard of :func:`unc3_guarded`.

  Returns:
    '' when the guarded UNC3 is defined, else one sentence.
  """
  cos_mean, cos_se = float(cos_mean), float(cos_se)
  if math.isfinite(cos_mean) and cos_mean != 0 and abs(cos_mean) >= n_se * cos_se:
    return ""
  return (f"UNC3 undefined: |mean cos(w_c, mu~_c)| = {abs(cos_mean):.3g} < {n_se:g} standard "
          f"errors ({n_se:g} x {cos_se:.3g}); the sign of the mean self-duality is not resolved, "
          "so std/mean is ill-conditioned")
