"""The scaling law L(N) = A / N^alpha + E (Kaplan et al. 2020; Godey et al. 2024, Sec. 3), fitted
by least squares with A, E >= 0, alpha in [alpha_min, alpha_max]: for each alpha on a log grid
the best (A, E) >= 0 in closed form (variable projection), the best grid alpha refined by
``scipy.optimize.least_squares`` on (A / N_ref^alpha, alpha, E), N_ref the geometric mean of N.
``gap_pct(L, N)`` = 100 (L − L_fit(N)) / L_fit(N): how far above (> 0) the law a model is."""

from __future__ import annotations

import dataclasses

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


def _best_ae(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
  """(A, E, sse) of min ||A x + E − y||² over A, E >= 0: the interior solution when it is
  feasible, else the better boundary (E = 0 or A = 0)."""
  xm, ym, cands = x.mean(), y.mean(), []
  vx = float(((x - xm) ** 2).sum())
  if vx > 0:
    a = float(((x - xm) * (y - ym)).sum() / vx)
    if a >= 0 and float(ym - a * xm) >= 0:
      cands.append((a, float(ym - a * xm)))
  if float(x @ x) > 0:
    cands.append((max(0.0, float(x @ y) / float(x @ x)), 0.0))
  cands.append((0.0, max(0.0, float(ym))))
  return min(((a, e, float(((a * x + e - y) ** 2).sum())) for a, e in cands), key=lambda c: c[2])


def fit_power_law(n, loss, *, alpha_min: float = 1e-3, alpha_max: float = 3.0,
                  grid: int = 400) -> ScalingFit:
  """Fit L = A / N^alpha + E to points (N_i, L_i) (module doc). Needs >= 3 points."""
  n, y = np.asarray(n, np.float64).reshape(-1), np.asarray(loss, np.float64).reshape(-1)
  if n.size < 3:
    raise ValueError(f"the fit L = A/N^alpha + E has 3 parameters and needs >= 3 points; got "
                     f"{n.size}. Use more model sizes in the fit")
  n_ref = float(np.exp(np.mean(np.log(n))))
  z = n / n_ref
  a0, e0, sse0, al0 = min(((*_best_ae(z ** -al, y), float(al))
                           for al in np.geomspace(alpha_min, alpha_max, grid)), key=lambda c: c[2])

  def resid(p):
    return p[0] * z ** -p[1] + p[2] - y

  ymax = float(np.max(np.abs(y))) + 1.0
  res = least_squares(resid, x0=[max(a0, 1e-12), al0, max(e0, 0.0)],
                      bounds=([0.0, alpha_min, 0.0], [np.inf, alpha_max, 10 * ymax]),
                      xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=10_000)
  if float((res.fun ** 2).sum()) <= sse0:
    a0, al0, e0 = (float(v) for v in res.x)
  pred = a0 * z ** -al0 + e0
  rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
  return ScalingFit(A=float(a0 * n_ref ** al0), alpha=float(al0), E=float(e0),
                    n_points=int(n.size), rmse=rmse)


def bootstrap_gap(n, losses_PxW, in_fit, *, n_boot: int = 300, ci: float = 0.95, seed: int = 0,
                  grid: int = 100) -> dict:
  """{lo, hi}: the percentile CI of every point's gap_pct to the law fitted on the points
  ``in_fit``, by a paired bootstrap over validation windows: ``losses_PxW[i, w]`` is model i's
  loss on window w (the same W windows for every model); each draw resamples the windows with
  replacement (one draw for all models), refits on the resampled means and recomputes every gap."""
  n, L, infit = (np.asarray(n, np.float64), np.asarray(losses_PxW, np.float64),
                 np.asarray(in_fit, bool))
  w = L.shape[1]
  counts = np.random.default_rng(seed).multinomial(w, np.full(w, 1.0 / w), size=n_boot)
  g = np.array([fit_power_law(n[infit], m[infit], grid=grid).gap_pct(m, n)
                for m in (L @ c / w for c in counts)])
  lo, hi = np.quantile(g, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
  return {"lo": lo, "hi": hi}


def leave_one_out(n, loss, in_fit) -> dict[int, np.ndarray]:
  """{i: every point's gap_pct to the law fitted on the points ``in_fit`` without point i}, for
  each fitted i ({} with fewer than 4 fitted points: a fit needs 3)."""
  n, y, infit = (np.asarray(n, np.float64), np.asarray(loss, np.float64),
                 np.asarray(in_fit, bool))
  fitted = np.nonzero(infit)[0]
  if fitted.size < 4:
    return {}
  keep = {int(i): infit & (np.arange(infit.size) != i) for i in fitted}
  return {i: fit_power_law(n[k], y[k]).gap_pct(y, n) for i, k in keep.items()}
