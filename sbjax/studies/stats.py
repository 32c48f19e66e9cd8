"""Correlation statistics across a population of models (numpy and scipy), for relating a
metric x to the validation loss y over models (the collapse and convergence experiments).

* ``pearson(x, y)``: r = Σ (x − x̄)(y − ȳ) / sqrt(Σ (x − x̄)² Σ (y − ȳ)²), over the last axis;
  ``finite_pearson``, ``spearman``: r, and r of the average ranks, over the finite pairs.
* ``r_squared(x, y)``: R² = 1 − SS_res / SS_tot of the least-squares line y ≈ a + b x.
* ``fisher_ci(r, n, level, n_controls)``: z = atanh(r), se = 1 / sqrt(n − 3 − n_controls),
  [tanh(z − z_q se), tanh(z + z_q se)] with z_q = Φ⁻¹((1 + level) / 2).
* ``partial_summary(x, y, z)``: r_xy·z = (r_xy − r_xz r_yz) / sqrt((1 − r_xz²)(1 − r_yz²)),
  the Pearson r of the residuals of x and y after their least-squares lines on z.
* ``ci_sign(lo, hi)``: +1 above 0, −1 below, 0 when the interval contains 0, NaN undefined.
* ``spearman_test(x, y, n_resamples)``: (ρ, two-sided permutation p) over the pairings of y
  with x (``scipy.stats.permutation_test``; exact when n! ≤ ``n_resamples``, else seeded
  draws); NaN for fewer than 3 pairs, a constant side or any non-finite value.
* ``permutation_pvalue(x, y, n_perm)``: r_j = pearson(x, y[π_j]) for ``n_perm`` uniform
  random permutations π_j, p = (1 + #{j : |r_j| ≥ |r_obs|}) / (n_perm + 1) (Phipson & Smyth
  2010: never 0, exactly valid under exchangeability).

Pairs (triples) with a non-finite value are dropped; with fewer than 3 left, or a constant
side, a statistic is NaN (never an exception mid-report).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri
from scipy.stats import permutation_test, rankdata


def finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
  """The pairs (x_i, y_i) where both are finite, as float64 1-D arrays."""
  x = np.asarray(x, np.float64).ravel()
  y = np.asarray(y, np.float64).ravel()
  m = np.isfinite(x) & np.isfinite(y)
  return x[m], y[m]


def _centred(a):
  a = np.asarray(a, np.float64)
  if a.shape[-1] == 0:  # no pairs: nothing to centre (pearson gives NaN, n < 3), no warning
    return a
  return a - a.mean(axis=-1, keepdims=True)


def pearson(x, y) -> np.ndarray:
  """Pearson r over the last axis (NaN where x or y is constant or n < 3)."""
  xc, yc = _centred(x), _centred(y)
  den = np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
  with np.errstate(invalid="ignore", divide="ignore"):
    r = np.where(den > 0, (xc * yc).sum(-1) / np.where(den > 0, den, 1.0), np.nan)
  if xc.shape[-1] < 3:
    r = np.full(np.shape(r), np.nan)
  return np.clip(r, -1.0, 1.0)


def finite_pearson(x, y) -> float:
  """Pearson r of the finite pairs of 1-D ``x``, ``y``."""
  return float(pearson(*finite_pairs(x, y)))


def spearman(x, y) -> float:
  """Spearman's rho of the finite pairs: Pearson r of their average ranks (ties averaged)."""
  x, y = finite_pairs(x, y)
  return float(pearson(rankdata(x), rankdata(y)))


def spearman_test(x, y, n_resamples: float = np.inf) -> tuple[float, float]:
  """(ρ, two-sided permutation p) of the pairs (x_i, y_i) (module doc)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 3 or not (np.isfinite(x).all() and np.isfinite(y).all()) or np.ptp(x) == 0 \
      or np.ptp(y) == 0:
    return float("nan"), float("nan")
  rx = rankdata(x)
  rx -= rx.mean()

  def rho(b, axis=-1):  # y's order against x's: one sample, its n! pairings
    rb = rankdata(b, axis=axis)
    rb = rb - rb.mean(axis, keepdims=True)
    return (rx * rb).sum(axis) / np.sqrt((rx ** 2).sum() * (rb ** 2).sum(axis))

  res = permutation_test((y,), rho, permutation_type="pairings", vectorized=True,
                         n_resamples=n_resamples, alternative="two-sided", rng=0)
  return float(res.statistic), float(res.pvalue)


def fisher_ci(r, n, level: float = 0.95, n_controls: int = 0) -> tuple[float, float]:
  """(lo, hi): the Fisher-z interval of Pearson r over n pairs (module doc); NaN where
  n - 3 - n_controls < 1 or r is NaN. |r| = 1 gives [r, r]."""
  r, dof = float(r), int(n) - 3 - int(n_controls)
  if dof < 1 or not np.isfinite(r):
    return float("nan"), float("nan")
  if abs(r) >= 1.0:
    return float(np.sign(r)), float(np.sign(r))
  z, se = np.arctanh(r), 1.0 / np.sqrt(dof)
  q = float(ndtri(0.5 + level / 2.0))
  return float(np.tanh(z - q * se)), float(np.tanh(z + q * se))


def ci_sign(lo, hi) -> float:
  """+1 (interval above 0), -1 (below 0), 0 (contains 0: undecided), NaN (undefined)."""
  lo, hi = float(lo), float(hi)
  if not (np.isfinite(lo) and np.isfinite(hi)):
    return float("nan")
  return 1.0 if lo > 0 else (-1.0 if hi < 0 else 0.0)


def r_squared(x, y) -> np.ndarray:
  """R² = 1 - SS_res/SS_tot of the least-squares line y ≈ a + b x (last axis)."""
  xc, yc = _centred(x), _centred(y)
  sxx = (xc * xc).sum(-1)
  syy = (yc * yc).sum(-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    b = np.where(sxx > 0, (xc * yc).sum(-1) / np.where(sxx > 0, sxx, 1.0), np.nan)
    res = yc - b[..., None] * xc
    r2 = np.where((sxx > 0) & (syy > 0), 1.0 - (res * res).sum(-1) / np.where(syy > 0, syy, 1.0),
                  np.nan)
  if xc.shape[-1] < 3:
    r2 = np.full(np.shape(r2), np.nan)
  return r2


def permutation_pvalue(x, y, n_perm: int = 10_000, *, seed: int = 0) -> float:
  """The two-sided permutation p-value of Pearson r(x, y) (module doc), the permutations drawn
  as the argsort of ``numpy.random.default_rng(seed).random((n_perm, n))``."""
  xc, yc = _centred(x), _centred(y)
  r_obs = float(pearson(xc, yc))
  # r_j = <xc, yc[π]> / (|xc| |yc|): the norms do not change under permutation
  den = np.sqrt((xc * xc).sum() * (yc * yc).sum())
  perm = np.argsort(np.random.default_rng(seed).random((int(n_perm), xc.size)), axis=-1)
  rj = (xc * yc[perm]).sum(-1) / (den if den > 0 else 1.0)
  hits = int((np.abs(rj) >= abs(r_obs) - 1e-12).sum())  # ties within rounding count
  return (1.0 + hits) / (n_perm + 1.0) if np.isfinite(r_obs) else float("nan")


def correlation_summary(x, y, n_perm: int = 0, seed: int = 0) -> dict:
  """{n, pearson_r, r2, ci_lo, ci_hi (the 95% Fisher-z interval of r), p_perm (if
  n_perm > 0)} over the finite pairs of x and y."""
  xf, yf = finite_pairs(x, y)
  r = float(pearson(xf, yf))
  lo, hi = fisher_ci(r, xf.size)
  out = {"n": int(xf.size), "pearson_r": r, "r2": float(r_squared(xf, yf)), "ci_lo": lo,
         "ci_hi": hi}
  if n_perm:
    out["p_perm"] = permutation_pvalue(xf, yf, n_perm, seed=seed) if xf.size >= 3 \
        else float("nan")
  return out


def partial_summary(x, y, z) -> dict:
  """{n, partial_r, partial_ci_lo, partial_ci_hi}: r of x and y with z partialled out over
  the finite triples (module doc), and its 95% Fisher-z interval (se = 1/sqrt(n - 4))."""
  x, y, z = (np.asarray(a, np.float64).ravel() for a in (x, y, z))
  m = np.isfinite(x) & np.isfinite(y) & np.isfinite(z)
  x, y, z = x[m], y[m], z[m]
  r = float("nan")
  if x.size >= 3:
    rxy, rxz, ryz = (float(pearson(a, b)) for a, b in ((x, y), (x, z), (y, z)))
    den = (1.0 - rxz * rxz) * (1.0 - ryz * ryz)
    if np.isfinite(den) and den > 1e-12 and np.isfinite(rxy):
      r = float(np.clip((rxy - rxz * ryz) / np.sqrt(den), -1.0, 1.0))
  lo, hi = fisher_ci(r, x.size, n_controls=1)
  return {"n": int(x.size), "partial_r": r, "partial_ci_lo": lo, "partial_ci_hi": hi}
