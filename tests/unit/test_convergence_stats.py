"""experiments/convergence/stats.py: the step from which a curve stays above a level, the
stratified test of Spearman(PER, step) and the width-order rule, against constructed series and
brute-force enumerations with scipy.stats.spearmanr."""

import itertools

import numpy as np
import pytest
from scipy import stats

from experiments.convergence.presets import Rule
from experiments.convergence.stats import decide, stays_from, stratified_spearman_test


def test_the_step_a_curve_stays_from():
  steps = [0, 10, 20, 40, 80, 160]
  assert stays_from(steps, [0.1, 0.95, 0.5, 0.91, 0.97, 1.0], 0.9) == 40  # not 10
  assert stays_from(steps, [0.92, 0.95, 0.93, 0.91, 0.97, 1.0], 0.9) == 0
  assert stays_from(steps, [0.1, 0.2, 0.3, 0.5, 0.95, 0.8], 0.9) is None
  assert stays_from(steps, [0.9, np.nan, 0.95, 0.9, 0.9, 1.0], 0.9) == 20  # NaN is below


def brute_force(x, y, g):
  """Exact stratified p by enumerating every combination of within-stratum permutations
  (scipy's rho of each permutation of each stratum, computed once)."""
  groups = [np.nonzero(g == s)[0] for s in dict.fromkeys(g.tolist())]
  obs = np.mean([stats.spearmanr(x[i], y[i])[0] for i in groups])
  rhos = [[stats.spearmanr(x[i], y[list(p)])[0] for p in itertools.permutations(i)]
          for i in groups]
  ts = np.array([np.mean(c) for c in itertools.product(*rhos)])
  return obs, np.mean(np.abs(ts) >= abs(obs) - 1e-12)


def test_stratified_permutation_test_matches_brute_force():
  x = np.array([0.2, 0.5, 0.4, 0.9, 0.1, 0.3, 0.35, 0.8, 0.6])
  y = np.array([100, 300, 300, 400, 50, 20, 90, 70, 95], float)  # ties in stratum a
  g = np.array(["a", "a", "a", "a", "b", "b", "b", "b", "b"])
  obs, p_ref = brute_force(x, y, g)
  r = stratified_spearman_test(x, y, g)
  assert r["exact"] and r["n_perm"] == 24 * 120
  assert r["statistic"] == pytest.approx(obs, abs=1e-12) and r["p"] == pytest.approx(p_ref)
  for row, s in zip(r["strata"], ("a", "b")):
    assert row["rho"] == pytest.approx(stats.spearmanr(x[g == s], y[g == s])[0])
  # the random-permutation path agrees with the exact p
  mc = stratified_spearman_test(x, y, g, exact_max=0, n_perm=4000, seed=1)
  assert not mc["exact"] and mc["p"] == pytest.approx(p_ref, abs=0.03)
  # a constant stratum is left out (rho undefined), not an error
  y2 = y.copy()
  y2[g == "b"] = 5.0
  r2 = stratified_spearman_test(x, y2, g)
  assert np.isnan(r2["strata"][1]["rho"]) and r2["statistic"] == pytest.approx(
      stats.spearmanr(x[:4], y[:4])[0])


def test_width_rule_each_branch_against_an_enumeration():
  """3 widths x 2 seeds, two layers a run (median f): ρ is scipy's Spearman of the widths and
  medians, p the share of all 720 pairings with |ρ*| ≥ |ρ|; a perfect order decides either way,
  one swap across widths (p 48/720) or a constant side does not; another level decides nothing."""
  w = [32, 32, 64, 64, 128, 128]
  for f, v in (([.9, .8, .7, .6, .5, .4], "supported"), ([.4, .5, .6, .7, .8, .9], "refuted"),
               ([.9, .7, .8, .6, .5, .4], "undecided at this size")):
    rows = [{"model": f"m{i}", "width": x, "probe": 0, "level": lv, "stabilisation_frac": y + e}
            for i, x in enumerate(w) for lv, y in ((0.9, f[i]), (0.8, 0.1 * i))
            for e in (-0.05, 0.05)]
    d, rho = decide(Rule(), rows), stats.spearmanr(w, f)[0]
    null = [stats.spearmanr(w, np.array(f)[list(q)])[0] for q in itertools.permutations(range(6))]
    assert (d["verdict"], d["n_runs"]) == (f"larger models stabilise earlier: {v}", 6)
    assert (d["rho"], d["p"]) == pytest.approx((rho, np.mean(np.abs(null) >= abs(rho) - 1e-12)))
  d = decide(Rule(), [dict(r, stabilisation_frac=0.5) for r in rows])
  assert d["verdict"].endswith("undecided at this size") and np.isnan(d["rho"])
