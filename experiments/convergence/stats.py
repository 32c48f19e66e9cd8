"""The statistics of layer convergence (Diehl Martinez et al. 2024).

``stays_from``: the first checkpoint after which a curve stays ≥ a level (NaN counts as below). ``stratified_spearman_test(x, y, strata)``:
Spearman ρ_g (Pearson of average ranks, as scipy's) within each stratum g (a model × a kind;
x = a layer's PER, y = its stabilisation step) where defined (≥ 3 pairs, neither side
constant), T = mean_g ρ_g; null: y exchangeable within strata. p = #{|T*| ≥ |T|} / #perms over
every combination of within-stratum permutations when Π_g n_g! ≤ ``exact_max``, else
(1 + #{|T*_j| ≥ |T|}) / (n_perm + 1) over random draws (Phipson & Smyth 2010); each stratum's
own p likewise (4 layers: 24 permutations, p ≥ 2/24; only T can reach 0.05). ``decide``:
``presets.Rule`` on stab_levels.csv.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

from sbjax.studies.stats import spearman_test


def stays_from(steps, values, level: float) -> int | None:
  """min{s_k : v_j ≥ level for all j ≥ k}; None if v at the last checkpoint is < level."""
  steps, v = np.asarray(steps), np.asarray(values, np.float64)
  ok = np.nan_to_num(v, nan=-np.inf) >= level
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
  return None if nx == 0 or ny == 0 else (rx / nx, ry / ny)


def _perms(n: int, n_perm: int, exact: bool, rng) -> np.ndarray:
  if exact:
    return np.array(list(itertools.permutations(range(n))), np.int64)
  return np.argsort(rng.random((n_perm, n)), axis=1)


def _p(t, obs: float, exact: bool, n_perm: int) -> float:
  hits = int((np.abs(t) >= abs(obs) - 1e-12).sum())
  return hits / len(t) if exact else (1 + hits) / (n_perm + 1)


def stratified_spearman_test(x, y, strata, *, n_perm: int = 10_000, exact_max: int = 50_000,
                             seed: int = 0) -> dict:
  """The stratified permutation test of the module doc: {statistic (T), p, exact, n_perm,
  strata: [{stratum, n, rho, p, exact}]}."""
  x, y, g = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(strata)
  rng = np.random.default_rng(seed)
  per, used = [], []
  for s in dict.fromkeys(g.tolist()):
    sel = g == s
    pair = _rank_pairs(x[sel], y[sel])
    row = {"stratum": s, "n": int((np.isfinite(x[sel]) & np.isfinite(y[sel])).sum()),
           "rho": math.nan, "p": math.nan, "exact": False}
    if pair is not None:
      rx, ry = pair
      exact = math.factorial(len(rx)) <= exact_max
      obs = float(rx @ ry)
      row.update(rho=obs, exact=exact,
                 p=_p(ry[_perms(len(rx), n_perm, exact, rng)] @ rx, obs, exact, n_perm))
      used.append((rx, ry))
    per.append(row)
  if not used:
    return {"statistic": math.nan, "p": math.nan, "exact": False, "n_perm": 0, "strata": per}
  t_obs = float(np.mean([rx @ ry for rx, ry in used]))
  exact = math.prod(math.factorial(len(rx)) for rx, _ in used) <= exact_max
  if exact:  # every combination of within-stratum permutations
    t = np.zeros(1)
    for rx, ry in used:
      t = (t[:, None] + (ry[_perms(len(rx), 0, True, rng)] @ rx)[None, :]).ravel()
    t /= len(used)
  else:
    t = np.mean([ry[_perms(len(rx), n_perm, False, rng)] @ rx for rx, ry in used], axis=0)
  return {"statistic": t_obs, "p": float(_p(t, t_obs, exact, n_perm)), "exact": exact,
          "n_perm": len(t), "strata": per}


def decide(rule, levels) -> dict:
  """``rule`` (``presets.Rule``) on stab_levels.csv rows: its primary cell (ρ, p NaN when a side
  is constant, a fraction undefined or fewer than 3 runs) and the verdict with its reason."""
  runs = {}
  for r in (r for r in levels if (r["level"], r["probe"]) == (rule.level, rule.probe)):
    runs.setdefault((r["model"], r["width"]), []).append(r["stabilisation_frac"])
  w, f = np.array([k[1] for k in runs], float), np.array([np.median(v) for v in runs.values()])
  rho, p = spearman_test(w, f)  # exact over the pairings
  v = ("supported" if rho < 0 else "refuted") if p < rule.alpha else "undecided at this size"
  return {"n_runs": len(w), "rho": rho, "p": p, "verdict": f"larger models stabilise earlier: {v}",
          "reason": f"Spearman(width, median stabilisation fraction at level {rule.level:g}, probe "
                    f"{rule.probe}) over {len(w)} runs of {len(set(w))} widths: ρ {rho:+.3f}, "
                    f"permutation p {p:.3g} (α {rule.alpha:g})"}
