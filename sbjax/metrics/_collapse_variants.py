"""Variants of the neural-collapse metrics that correct or guard the plain estimators
(``docs/metrics.md`` sections 3.3 and 3.5).

Pure jax.numpy on the analysed class statistics of one checkpoint (a leading checkpoint
axis composes with ``jax.vmap``); results are ``NamedTuple`` pytrees. The keys that
:func:`sbjax.metrics.collapse_metrics` derives from them are listed in the
module doc of ``_neural_collapse`` (``nc2_norm_cov_corrected``, ``unc3_cos_cov_guarded``, ...).

**Bias-corrected squared norms** (:func:`corrected_sq_norms`). A class mean estimated from
N_c tokens, mu^_c = mu_c + e_c with E e_c = 0 and E||e_c||^2 = sigma_c^2 / N_c, has

        E ||mu^_c - mu_G||^2 = ||mu_c - mu_G||^2 + sigma_c^2 / N_c        (mu_G known).

With few tokens per class the norms, and their CoV (NC2 equinormness), then mostly
measure how the counts N_c differ between classes. The global mean is itself estimated,
mu^_G = sum_c a_c mu^_c (a_c = 1/K unweighted, the authors' default; a_c = N_c / sum N
token-weighted), which gives the exact expectation used here:

        E ||mu^_c - mu^_G||^2 = ||mu_c - mu_G||^2 + b_c,
        b_c = (1 - 2 a_c) s_c + sum_{c'} a_{c'}^2 s_{c'},      s_c = sigma^_c^2 / N_c,

(b_c -> s_c = sigma_c^2/N_c as K -> infinity, the textbook correction), with the unbiased
class variance sigma^_c^2 = sum_{y_i=c} ||h_i - mu^_c||^2 / (N_c - 1) (the biased trace
sigma_c^2 of ``class_variances`` times N_c / (N_c - 1)). It needs N_c >= 2: classes with a
single token are left out of the corrected statistics (their spread is unknown) and mu^_G
is taken over the classes kept. The corrected squared norm n2_c = ||mu^_c - mu^_G||^2 - b_c
is unbiased for each class; it can be negative when a class's true norm is small against
its noise, so it is **clipped at 0** (``n_clipped`` counts the clipped classes; clipping
biases the corrected norms slightly upward where it happens).

What the correction does not remove: the estimation *noise* of each norm (its standard
deviation ~ 2 ||mu_c - mu_G|| sqrt(s_c / d_eff) + s_c sqrt(2 / d_eff), d_eff = the
effective dimension of the class covariance). The CoV of corrected norms is therefore
free of the count-driven bias but keeps a noise floor where s_c is not small against
||mu_c - mu_G||^2; a ratio of noisy terms is only approximately unbiased.

**Guarded UNC3** (:func:`unc3_guarded`). UNC3 = std(cos_c) / mean(cos_c) with cos_c =
cos(w_c, mu~_c) is ill-conditioned when the mean is near 0. The guard reports NaN when
|mean| < ``n_se`` (default 3) standard errors, SE = std(cos_c; ddof) / sqrt(K), i.e. when
the sign of the mean is not resolved; ``unc3_reason`` says why.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._util import check_shapes, masked_mean_std


class CorrectedNorms(NamedTuple):
  """sq_norms (K,): max(||mu^_c - mu^_G||^2 - b_c, 0) (0 where not valid); raw_sq_norms (K,):
  ||mu^_c - mu^_G||^2 with mu^_G over the same classes; bias (K,): b_c; valid (K,) bool:
  analysed classes with N_c >= 2; n_valid, n_clipped: scalars."""

  sq_norms: jax.Array
  raw_sq_norms: jax.Array
  bias: jax.Array
  valid: jax.Array
  n_valid: jax.Array
  n_clipped: jax.Array


class Unc3(NamedTuple):
  """value: std/mean of cos_c, NaN where ill-conditioned; raw: std/mean unguarded;
  cos_mean, cos_std, cos_se = cos_std / sqrt(K); ill_conditioned: |cos_mean| < n_se cos_se."""

  value: jax.Array
  raw: jax.Array
  cos_mean: jax.Array
  cos_std: jax.Array
  cos_se: jax.Array
  ill_conditioned: jax.Array


def corrected_sq_norms(means_KxD, variances_K, counts_K, valid_K=None, *,
                       weighted_mean: bool = False) -> CorrectedNorms:
  """Bias-corrected squared norms of the centred class means (formula in the module doc).

  Args:
    means_KxD: (K, d) class means mu^_c.
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
  return CorrectedNorms(jnp.where(ok, jnp.maximum(corr, 0.0), 0.0), raw, bias, ok,
                        jnp.sum(ok.astype(jnp.int32)), jnp.sum((ok & (corr < 0)).astype(jnp.int32)))


def norm_cov(sq_norms_K, valid_K, *, variant: str = "norm", ddof: int = 1):
  """CoV std(x)/mean(x) over the valid classes.

  Args:
    sq_norms_K: (K,) squared norms.
    valid_K: (K,) bool.
    variant: static; ``"norm"`` (default): x = sqrt(sq_norms); ``"squared"``: x = sq_norms.
    ddof: static; of the standard deviation.

  Returns:
    Scalar, the norms' dtype; NaN with fewer than ddof + 1 classes or a zero mean.
  """
  check_shapes("norm_cov", sq_norms_K=(sq_norms_K, "K"), valid_K=(valid_K, "K"))
  if variant not in ("norm", "squared"):
    raise ValueError(f"variant must be 'norm' or 'squared', got {variant!r}")
  sq = jnp.asarray(sq_norms_K)
  x = jnp.sqrt(jnp.maximum(sq, 0.0)) if variant == "norm" else sq
  mean, std, n = masked_mean_std(x, valid_K, ddof)
  ok = (n > ddof) & (mean != 0)
  return jnp.where(ok, std / jnp.where(mean != 0, mean, 1.0), jnp.nan)


def unc3_guarded(cos_K, valid_K, *, ddof: int = 1, n_se: float = 3.0) -> Unc3:
  """UNC3 = std(cos_c)/mean(cos_c) over the valid classes, NaN when |mean| < n_se * SE.

  Args:
    cos_K: (K,) cos(w_c, mu~_c).
    valid_K: (K,) bool.
    ddof: static; of the standard deviation.
    n_se: the guard, in standard errors SE = std / sqrt(K).

  Returns:
    An :class:`Unc3` of scalars (``ill_conditioned`` bool).
  """
  check_shapes("unc3_guarded", cos_K=(cos_K, "K"), valid_K=(valid_K, "K"))
  mean, std, n = masked_mean_std(jnp.asarray(cos_K), valid_K, ddof)
  se = std / jnp.sqrt(jnp.maximum(n, 1.0))
  raw = jnp.where(mean != 0, std / jnp.where(mean != 0, mean, 1.0), jnp.inf)
  bad = (jnp.abs(mean) < n_se * se) | (mean == 0)
  return Unc3(jnp.where(bad, jnp.nan, raw), raw, mean, std, se, bad)


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
