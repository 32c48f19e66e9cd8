"""Correlation statistics across a population of models (numpy only).

Used by the Wu & Papyan (2024) experiment (``experiments/collapse/``) to relate each
collapse metric x to the validation loss y over models.

* ``pearson(x, y)``: r = sum (x - x̄)(y - ȳ) / sqrt(sum (x - x̄)^2 sum (y - ȳ)^2).
* ``finite_pearson(x, y)``, ``spearman(x, y)``: r, and r of the average ranks, over the
  finite pairs (the one Pearson of sbjax: every caller gets the same NaN rule).
* ``r_squared(x, y)``: the coefficient of determination of the least-squares line
  y ≈ a + b x, R² = 1 - SS_res / SS_tot with SS_res = sum (y - a - b x)^2 and
  SS_tot = sum (y - ȳ)^2 (equal to r² for a simple linear fit; the authors' R²).
* ``permutation_pvalue(x, y, n_perm)``: the two-sided permutation test of "no
  association": r_j = pearson(x, y[π_j]) for ``n_perm`` uniform random permutations π_j
  and p = (1 + #{j : |r_j| >= |r_obs|}) / (n_perm + 1) (Phipson & Smyth 2010: never 0,
  exactly valid under exchangeability). One-sided variants use r_j >= r_obs
  (``"greater"``) or r_j <= r_obs (``"less"``).

All three accept leading batch axes (``x``, ``y`` of shape (..., n)) and return arrays of
shape (...); the permutation test is vectorised: all permutations of all datasets come
from one ``argsort`` of uniform noise, (..., n_perm, n), processed in chunks of at most
``chunk`` permutations so that memory stays O(chunk · n) per dataset.

Non-finite entries: ``finite_pairs(x, y)`` drops pairs where either value is NaN/inf
(e.g. a metric undefined for one model); with fewer than 3 finite pairs, or a constant
x or y, the statistics are NaN (never an exception mid-report).
"""

from __future__ import annotations

import numpy as np
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
  """{n, pearson_r, r2, p_perm (if n_perm > 0)} over the finite pairs of x and y."""
  xf, yf = finite_pairs(x, y)
  out = {"n": int(xf.size), "pearson_r": float(pearson(xf, yf)), "r2": float(r_squared(xf, yf))}
  if n_perm:
    out["p_perm"] = float(permutation_pvalue(xf, yf, n_perm, seed=seed)) if xf.size >= 3 \
        else float("nan")
  return out
