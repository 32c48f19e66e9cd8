"""Correlation statistics across a population of models (numpy and scipy).

Used by the Wu & Papyan (2024) experiment (``experiments/collapse/``) to relate each
collapse metric x to the validation loss y over models.

* ``pearson(x, y)``: r = sum (x - x̄)(y - ȳ) / sqrt(sum (x - x̄)^2 sum (y - ȳ)^2).
* ``finite_pearson(x, y)``, ``spearman(x, y)``: r, and r of the average ranks, over the
  finite pairs (the one Pearson of sbjax: every caller gets the same NaN rule).
* ``r_squared(x, y)``: the coefficient of determination of the least-squares line
  y ≈ a + b x, R² = 1 - SS_res / SS_tot with SS_res = sum (y - a - b x)^2 and
  SS_tot = sum (y - ȳ)^2 (equal to r² for a simple linear fit; the authors' R²).
* ``fisher_ci(r, n, level=0.95, n_controls=0)``: the Fisher-z interval of a correlation:
  z = atanh(r), se = 1 / sqrt(n - 3 - n_controls), z_q = Φ⁻¹((1 + level) / 2),
  [tanh(z - z_q se), tanh(z + z_q se)] (NaN where n - 3 - n_controls < 1 or r is not finite;
  ``n_controls`` = the number of variables partialled out).
* ``partial_correlation(x, y, z)``, ``partial_summary(x, y, z)``: Pearson r of x and y with z
  partialled out,
  r_xy·z = (r_xy - r_xz r_yz) / sqrt((1 - r_xz²)(1 - r_yz²)), equal to the Pearson r of the
  residuals of x and of y after the least-squares lines on z (NaN where z is constant, or
  x or y is a linear function of z).
* ``ci_sign(lo, hi)``: +1 when the interval lies above 0, -1 below, 0 when it contains 0
  (undecided), NaN when undefined.
* ``permutation_pvalue(x, y, n_perm)``: the two-sided permutation test of "no
  association": r_j = pearson(x, y[π_j]) for ``n_perm`` uniform random permutations π_j
  and p = (1 + #{j : |r_j| >= |r_obs|}) / (n_perm + 1) (Phipson & Smyth 2010: never 0,
  exactly valid under exchangeability). One-sided variants use r_j >= r_obs
  (``"greater"``) or r_j <= r_obs (``"less"``).

``pearson``, ``r_squared`` and ``permutation_pvalue`` accept leading batch axes (``x``, ``y`` of shape (..., n)) and return arrays of
shape (...); the permutation test is vectorised: all permutations of all datasets come
from one ``argsort`` of uniform noise, (..., n_perm, n), processed in chunks of at most
``chunk`` permutations so that memory stays O(chunk · n) per dataset.

Non-finite entries: ``finite_pairs(x, y)`` drops pairs where either value is NaN/inf
(e.g. a metric undefined for one model); with fewer than 3 finite pairs, or a constant
x or y, the statistics are NaN (never an exception mid-report).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

ALTERNATIVES = ("two-sided", "greater", "less")


def finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
  """The pairs (x_i, y_i) where both are finite, as float64 1-D arrays."""
  x = np.asarray(x, np.float64).ravel()
  y = np.asarray(y, np.float64).ravel()
  if x.shape != y.shape:
    raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
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
  if xc.shape[-1] != yc.shape[-1]:
    raise ValueError(f"x and y must have the same last axis, got {xc.shape} and {yc.shape}")
  den = np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
  with np.errstate(invalid="ignore", divide="ignore"):
    r = np.where(den > 0, (xc * yc).sum(-1) / np.where(den > 0, den, 1.0), np.nan)
  if xc.shape[-1] < 3:
    r = np.full(np.shape(r), np.nan)
  return np.clip(r, -1.0, 1.0)


def finite_pearson(x, y) -> float:
  """Pearson r of the finite pairs of 1-D ``x``, ``y`` (NaN under :func:`pearson`'s rule:
  fewer than 3 finite pairs, or a constant side)."""
  return float(pearson(*finite_pairs(x, y)))


def spearman(x, y) -> float:
  """Spearman's rho of the finite pairs: Pearson r of their average ranks (ties averaged,
  ``scipy.stats.rankdata``), NaN under :func:`pearson`'s rule."""
  x, y = finite_pairs(x, y)
  return float(pearson(rankdata(x), rankdata(y)))


def fisher_ci(r, n, level: float = 0.95, n_controls: int = 0) -> tuple[float, float]:
  """(lo, hi): the Fisher-z interval of Pearson r over n pairs (module doc); NaN where
  n - 3 - n_controls < 1 or r is NaN. |r| = 1 gives [r, r]."""
  if not 0.0 < level < 1.0:
    raise ValueError(f"level must lie in (0, 1), e.g. 0.95; got {level}")
  r, dof = float(r), int(n) - 3 - int(n_controls)
  if dof < 1 or not np.isfinite(r):
    return float("nan"), float("nan")
  if abs(r) >= 1.0:
    return float(np.sign(r)), float(np.sign(r))
  z, se = np.arctanh(r), 1.0 / np.sqrt(dof)
  q = float(ndtri(0.5 + level / 2.0))
  return float(np.tanh(z - q * se)), float(np.tanh(z + q * se))


def partial_correlation(x, y, z) -> float:
  """Pearson r of the finite triples of x and y with z partialled out (module doc)."""
  x, y, z = (np.asarray(a, np.float64).ravel() for a in (x, y, z))
  if not x.shape == y.shape == z.shape:
    raise ValueError(f"x, y and z must have the same length, got {x.size}, {y.size}, {z.size}")
  m = np.isfinite(x) & np.isfinite(y) & np.isfinite(z)
  x, y, z = x[m], y[m], z[m]
  if x.size < 3:
    return float("nan")
  rxy, rxz, ryz = (float(pearson(a, b)) for a, b in ((x, y), (x, z), (y, z)))
  den = (1.0 - rxz * rxz) * (1.0 - ryz * ryz)
  if not (np.isfinite(den) and den > 1e-12 and np.isfinite(rxy)):
    return float("nan")
  return float(np.clip((rxy - rxz * ryz) / np.sqrt(den), -1.0, 1.0))


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


def permutation_pvalue(x, y, n_perm: int = 10_000, *, seed: int = 0,
                       alternative: str = "two-sided", chunk: int = 2048) -> np.ndarray:
  """Permutation-test p-value of Pearson r(x, y) over the last axis (see the module doc).

  ``x``, ``y``: (..., n). Every dataset gets its own ``n_perm`` permutations, drawn from
  ``numpy.random.default_rng(seed)``. Returns p of shape (...).
  """
  if alternative not in ALTERNATIVES:
    raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
  if int(n_perm) < 1:
    raise ValueError(f"n_perm must be >= 1, got {n_perm}")
  xc, yc = _centred(x), _centred(y)
  xc, yc = np.broadcast_arrays(xc, yc)
  n = xc.shape[-1]
  r_obs = pearson(xc, yc)
  # r_j = <xc, yc[π]> / (|xc| |yc|): the norms do not change under permutation.
  den = np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
  safe = np.where(den > 0, den, 1.0)
  rng = np.random.default_rng(seed)
  batch = xc.shape[:-1]
  hits = np.zeros(batch, np.int64)
  tol = 1e-12  # ties within rounding count as "at least as extreme"
  done = 0
  while done < n_perm:
    m = int(min(chunk, n_perm - done))
    perm = np.argsort(rng.random(batch + (m, n)), axis=-1)  # (..., m, n)
    yp = np.take_along_axis(yc[..., None, :], perm, axis=-1)
    rj = (xc[..., None, :] * yp).sum(-1) / safe[..., None]  # (..., m)
    if alternative == "two-sided":
      hits += (np.abs(rj) >= np.abs(r_obs)[..., None] - tol).sum(-1)
    elif alternative == "greater":
      hits += (rj >= r_obs[..., None] - tol).sum(-1)
    else:
      hits += (rj <= r_obs[..., None] + tol).sum(-1)
    done += m
  p = (1.0 + hits) / (n_perm + 1.0)
  return np.where(np.isfinite(r_obs), p, np.nan)


def correlation_summary(x, y, n_perm: int = 0, seed: int = 0) -> dict:
  """{n, pearson_r, r2, ci_lo, ci_hi (the 95% Fisher-z interval of r), p_perm (if
  n_perm > 0)} over the finite pairs of x and y."""
  xf, yf = finite_pairs(x, y)
  r = float(pearson(xf, yf))
  lo, hi = fisher_ci(r, xf.size)
  out = {"n": int(xf.size), "pearson_r": r, "r2": float(r_squared(xf, yf)), "ci_lo": lo,
         "ci_hi": hi}
  if n_perm:
    out["p_perm"] = float(permutation_pvalue(xf, yf, n_perm, seed=seed)) if xf.size >= 3 \
        else float("nan")
  return out


def partial_summary(x, y, z) -> dict:
  """{n, partial_r, partial_ci_lo, partial_ci_hi}: r of x and y with z partialled out over
  the finite triples, and its 95% Fisher-z interval (one control: se = 1/sqrt(n - 4))."""
  x, y, z = (np.asarray(a, np.float64).ravel() for a in (x, y, z))
  n = int(np.count_nonzero(np.isfinite(x) & np.isfinite(y) & np.isfinite(z)))
  r = partial_correlation(x, y, z)
  lo, hi = fisher_ci(r, n, n_controls=1)
  return {"n": n, "partial_r": r, "partial_ci_lo": lo, "partial_ci_hi": hi}
