"""Layer stabilisation (Diehl Martinez et al. 2024) and its link to PER, with a stratified
permutation test.

* ``stabilisation_step(steps, cka, level=0.9)``: the first checkpoint s_k such that
  CKA-to-final c_j ≥ level for every j ≥ k (the layer has settled and stays settled), not the
  first crossing; None when the last value is below ``level``. NaN counts as below.
* ``stratified_spearman_test(x, y, strata)``: Spearman ρ_g(x, y) within each stratum g
  (e.g. one model × one kind, MLP or OV; x = PER of a layer, y = its stabilisation step) and
  T = mean_g ρ_g over the strata where ρ is defined (≥ 3 pairs, neither side constant).
  Null: y exchangeable within each stratum. T* is recomputed with y permuted independently
  inside every stratum; p = #{|T*| ≥ |T|} / #perms over ALL permutations when their number
  Π_g n_g! is ≤ ``exact_max`` (exact; the identity is included), otherwise
  (1 + #{|T*_j| ≥ |T|}) / (n_perm + 1) over ``n_perm`` random draws (Phipson & Smyth 2010).
  Each stratum's own two-sided p comes the same way from its n_g! permutations.
  ρ = Pearson correlation of average ranks (``scipy.stats.rankdata``), as
  ``scipy.stats.spearmanr``. With 4 layers a stratum has 24 permutations, so its own p is
  ≥ 2/24 ≈ 0.083: only the pooled, stratified T can reach 0.05.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats


def stabilisation_step(steps, cka, level: float = 0.9) -> int | None:
  """min{s_k : c_j ≥ level for all j ≥ k}; None if c at the last checkpoint is < level."""
  steps, c = np.asarray(steps), np.asarray(cka, np.float64)
  if steps.shape != c.shape or steps.ndim != 1 or steps.size == 0:
    raise ValueError(f"steps and cka must be 1-D of one length, got {steps.shape}, {c.shape}")
  ok = np.nan_to_num(c, nan=-np.inf) >= level
  if not ok[-1]:
    return None
  bad = np.nonzero(~ok)[0]
  return int(steps[bad[-1] + 1]) if bad.size else int(steps[0])


def _rank_pairs(x, y):
  """Average ranks of the finite pairs, centred and scaled to unit norm (None if ρ is
  undefined: < 3 pairs or a constant side)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  ok = np.isfinite(x) & np.isfinite(y)
  if ok.sum() < 3:
    return None
  rx, ry = stats.rankdata(x[ok]), stats.rankdata(y[ok])
  rx, ry = rx - rx.mean(), ry - ry.mean()
  nx, ny = np.linalg.norm(rx), np.linalg.norm(ry)
  if nx == 0 or ny == 0:
    return None
  return rx / nx, ry / ny


def _perm_rhos(rx, ry, perms):
  """ρ for y permuted by each row of ``perms`` (P, n)."""
  return ry[perms] @ rx


def _all_or_random(n: int, n_perm: int, exact: bool, rng) -> np.ndarray:
  if exact:
    return np.array(list(itertools.permutations(range(n))), np.int64)
  return np.argsort(rng.random((n_perm, n)), axis=1)


def stratified_spearman_test(x, y, strata, *, n_perm: int = 10_000, exact_max: int = 50_000,
                             seed: int = 0) -> dict:
  """The stratified permutation test of the module doc. Returns {statistic (T), p, exact,
  n_perm, strata: [{stratum, n, rho, p, exact}]}."""
  x, y, g = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(strata)
  if not x.shape == y.shape == g.shape or x.ndim != 1:
    raise ValueError(f"x, y and strata must be 1-D of one length, got {x.shape}, {y.shape}, "
                     f"{g.shape}")
  rng = np.random.default_rng(seed)
  per, used = [], []
  for s in dict.fromkeys(g.tolist()):
    sel = g == s
    pair = _rank_pairs(x[sel], y[sel])
    row = {"stratum": s, "n": int((np.isfinite(x[sel]) & np.isfinite(y[sel])).sum()),
           "rho": float("nan"), "p": float("nan"), "exact": False}
    if pair is not None:
      rx, ry = pair
      n = len(rx)
      exact = math.factorial(n) <= exact_max
      rhos = _perm_rhos(rx, ry, _all_or_random(n, n_perm, exact, rng))
      obs = float(rx @ ry)
      hits = int((np.abs(rhos) >= abs(obs) - 1e-12).sum())
      row.update(rho=obs, exact=exact,
                 p=hits / len(rhos) if exact else (1 + hits) / (n_perm + 1))
      used.append((rx, ry))
    per.append(row)
  if not used:
    return {"statistic": float("nan"), "p": float("nan"), "exact": False, "n_perm": 0,
            "strata": per}
  t_obs = float(np.mean([rx @ ry for rx, ry in used]))
  total = math.prod(math.factorial(len(rx)) for rx, _ in used)
  exact = total <= exact_max
  if exact:  # every combination of within-stratum permutations
    each = [_perm_rhos(rx, ry, _all_or_random(len(rx), 0, True, rng)) for rx, ry in used]
    t = np.zeros(1)
    for r in each:
      t = (t[:, None] + r[None, :]).ravel()
    t /= len(used)
    hits, n_draw = int((np.abs(t) >= abs(t_obs) - 1e-12).sum()), len(t)
    p = hits / n_draw
  else:
    t = np.mean([_perm_rhos(rx, ry, _all_or_random(len(rx), n_perm, False, rng))
                 for rx, ry in used], axis=0)
    hits, n_draw = int((np.abs(t) >= abs(t_obs) - 1e-12).sum()), n_perm
    p = (1 + hits) / (n_perm + 1)
  return {"statistic": t_obs, "p": float(p), "exact": exact, "n_perm": int(n_draw),
          "strata": per}
