"""Scaling-law fit L(N) = A / N^alpha + E (Kaplan et al. 2020; Godey et al. 2024, Sec. 3).

Least squares over (A, alpha, E) with A >= 0, alpha in [alpha_min, alpha_max], E >= 0:

    minimise  sum_i (A * N_i^-alpha + E - L_i)^2

The model is linear in (A, E) for a fixed alpha, so the fit is done by variable
projection: for each alpha on a log grid the best (A, E) >= 0 is solved in closed form
(2x2 normal equations, or one-parameter fits on the boundary A = 0 / E = 0), the best
grid alpha is kept, and then refined with ``scipy.optimize.least_squares`` on
(A', alpha, E) with bounds, where A' = A / N_ref^alpha and N_ref = the geometric mean of
N (well conditioned). Three points and three parameters is an exact solve when one
exists with these signs (a decreasing, convex sequence in log N); otherwise the
least-squares compromise is returned and ``rmse`` says how far off it is.

``gap_pct(L_obs, N)`` = 100 * (L_obs - L(N)) / L(N): how far above (> 0) the law a model is.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.optimize import least_squares


@dataclasses.dataclass(frozen=True)
class ScalingFit:
  A: float
  alpha: float
  E: float
  n_points: int
  rmse: float  # root mean squared residual (nats) of the fitted points

  def predict(self, n) -> np.ndarray:
    n = np.asarray(n, np.float64)
    return self.A * np.power(n, -self.alpha) + self.E

  def gap_pct(self, loss, n) -> np.ndarray:
    """100 (L_obs - L_fit(N)) / L_fit(N)."""
    pred = self.predict(n)
    return 100.0 * (np.asarray(loss, np.float64) - pred) / pred

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _best_ae(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
  """min ||A x + E - y||^2 over A >= 0, E >= 0; returns (A, E, sse)."""
  cands = []
  xm, ym = x.mean(), y.mean()
  vx = float(((x - xm) ** 2).sum())
  if vx > 0:
    a = float(((x - xm) * (y - ym)).sum() / vx)
    e = float(ym - a * xm)
    if a >= 0 and e >= 0:
      cands.append((a, e))
  xx = float(x @ x)
  if xx > 0:
    cands.append((max(0.0, float(x @ y) / xx), 0.0))  # E = 0
  cands.append((0.0, max(0.0, float(ym))))  # A = 0
  best = None
  for a, e in cands:
    sse = float(((a * x + e - y) ** 2).sum())
    if best is None or sse < best[2]:
      best = (a, e, sse)
  return best


def fit_power_law(n, loss, *, alpha_min: float = 1e-3, alpha_max: float = 3.0,
                  grid: int = 400) -> ScalingFit:
  """Fit L = A / N^alpha + E to points (N_i, L_i) (module docstring). Needs >= 3 points."""
  n = np.asarray(n, np.float64).reshape(-1)
  y = np.asarray(loss, np.float64).reshape(-1)
  if n.shape != y.shape:
    raise ValueError(f"{n.size} values of N but {y.size} losses")
  if n.size < 3:
    raise ValueError(f"the fit L = A/N^alpha + E has 3 parameters and needs >= 3 points; got "
                     f"{n.size}. Use more model sizes in the fit")
  if not (np.all(np.isfinite(n)) and np.all(np.isfinite(y))):
    raise ValueError("N and the losses must be finite (a diverged run has a NaN loss)")
  if np.any(n <= 0):
    raise ValueError(f"N must be > 0, got {n.tolist()}")
  if not 0 < alpha_min < alpha_max:
    raise ValueError(f"need 0 < alpha_min={alpha_min} < alpha_max={alpha_max}")
  n_ref = float(np.exp(np.mean(np.log(n))))
  z = n / n_ref
  best = None
  for al in np.geomspace(alpha_min, alpha_max, grid):
    a, e, sse = _best_ae(z ** -al, y)
    if best is None or sse < best[3]:
      best = (a, float(al), e, sse)
  a0, al0, e0, _ = best

  def resid(p):
    return p[0] * z ** -p[1] + p[2] - y

  ymax = float(np.max(np.abs(y))) + 1.0
  res = least_squares(resid, x0=[max(a0, 1e-12), al0, max(e0, 0.0)],
                      bounds=([0.0, alpha_min, 0.0], [np.inf, alpha_max, 10 * ymax]),
                      xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=10_000)
  if float((res.fun ** 2).sum()) <= best[3]:
    a0, al0, e0 = (float(v) for v in res.x)
  pred = a0 * z ** -al0 + e0
  rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
  return ScalingFit(A=float(a0 * n_ref ** al0), alpha=float(al0), E=float(e0),
                    n_points=int(n.size), rmse=rmse)


def nan_fit(n_points: int = 0) -> ScalingFit:
  """A placeholder for 'no fit' (too few points): every field NaN."""
  return ScalingFit(A=math.nan, alpha=math.nan, E=math.nan, n_points=n_points, rmse=math.nan)


def bootstrap_gap(n, losses_PxW, in_fit, *, n_boot: int = 300, ci: float = 0.95, seed: int = 0,
                  grid: int = 100) -> dict:
  """Percentile CI of every point's gap_pct to the law fitted on the points ``in_fit``, by a
  paired bootstrap over validation windows: ``losses_PxW[i, w]`` is model i's loss on window w
  (the same W windows for every model); each draw resamples the windows with replacement
  (one draw for all models), refits on the resampled means and recomputes every gap.
  Returns {gap_pct (point estimate, P), lo (P), hi (P), n_ok (draws whose fit succeeded)}."""
  n = np.asarray(n, np.float64)
  L = np.asarray(losses_PxW, np.float64)
  infit = np.asarray(in_fit, bool)
  mean = L.mean(axis=1)
  f0 = fit_power_law(n[infit], mean[infit], grid=grid)
  rng = np.random.default_rng(seed)
  w = L.shape[1]
  counts = rng.multinomial(w, np.full(w, 1.0 / w), size=n_boot)
  gaps = []
  for c in counts:
    m = L @ c / w
    try:
      gaps.append(fit_power_law(n[infit], m[infit], grid=grid).gap_pct(m, n))
    except ValueError:
      continue
  g = np.array(gaps).reshape(-1, len(n))
  nan = np.full(len(n), np.nan)
  lo, hi = (np.quantile(g, q, axis=0) if len(g) else nan for q in ((1 - ci) / 2, (1 + ci) / 2))
  return {"gap_pct": f0.gap_pct(mean, n), "lo": lo, "hi": hi, "n_ok": len(g)}
