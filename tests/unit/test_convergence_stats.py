"""experiments/convergence/stats.py: the step from which a curve stays above a level, the
stratified permutation test of Spearman(PER, step) (against constructed series and a
brute-force enumeration with scipy.stats.spearmanr), and the pre-registered rule with the
report's scope line on small CSVs that made the old reports overclaim."""

import itertools

import numpy as np
import pytest
from scipy import stats

from experiments import convergence as exp
from experiments.common import read_rows, write_rows
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


def _decide(tmp_path, fracs: dict) -> dict:
  """D2 of the rule on a stab_levels.csv of one layer per model: fracs[(width, seed, probe)]
  at level 0.9 (written and read back as the experiment's CSV), D3 on a null stratified row."""
  write_rows(tmp_path / "stab_levels.csv", [
      {"model": f"d{w}s{s}", "width": w, "probe": p, "kind": "mlp", "layer": 0, "level": 0.9,
       "stabilisation_frac": f} for (w, s, p), f in fracs.items()])
  null = {"per": Rule().per, "n": 8, "spearman": 0.1, "p_perm": 0.6}
  return decide(Rule(), exp._order(read_rows(tmp_path / "stab_levels.csv")), [null])


def test_no_order_claim_from_two_widths_on_one_seed(tmp_path):
  """The old report said "larger models stabilise earlier: supported" from d32 0.64 vs d128
  0.56 on probe 0, though probe 1 said the opposite (0.68 vs 0.70)."""
  d = _decide(tmp_path, {(32, 0, 0): 0.64, (128, 0, 0): 0.56, (32, 0, 1): 0.68,
                         (128, 0, 1): 0.70})
  assert d["D2"]["verdict"] == "undecided" and "none is made" in d["D2"]["reason"]
  assert d["D3"]["verdict"] == "undecided" and "n = 8" in d["D3"]["reason"]


def test_width_order_verdicts_against_an_exact_enumeration(tmp_path):
  """3 widths x 2 seeds: a perfect order decides (p = 16/720, scipy's exact pairing test),
  one swap across widths does not (48/720)."""
  w = np.repeat([32, 64, 128], 2)
  for fr, verdict in (([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], "supports"),
                      ([0.4, 0.5, 0.6, 0.7, 0.8, 0.9], "refutes"),
                      ([0.9, 0.7, 0.8, 0.6, 0.5, 0.4], "undecided")):
    d = _decide(tmp_path, {(int(x), i % 2, 0): f for i, (x, f) in enumerate(zip(w, fr))})
    ref = stats.permutation_test((w, fr), lambda a, b: stats.spearmanr(a, b)[0],
                                 permutation_type="pairings", n_resamples=np.inf)
    assert d["D2"]["verdict"] == verdict and f"p {ref.pvalue:.3g}" in d["D2"]["reason"]
    assert f"{ref.statistic:+.3f}" in d["D2"]["reason"] and "n = 6 models" in d["D2"]["reason"]


def test_scope_makes_no_claim_about_the_larger_class(tmp_path):
  """The old report said "the layers of the largest model stabilise within 20%: refuted" of
  4-layer models of d <= 128."""
  write_rows(tmp_path / "runs.csv", [{"model": f"d{w}", "width": w, "n_params": n}
                                     for w, n in ((32, 119_000), (128, 1_050_000))])
  line = exp.scope(read_rows(tmp_path / "runs.csv"))
  assert "2 models of 119,000–1,050,000 parameters, 0 in" in line and "not tested here" in line
  assert not {"refuted", "supported", "reproduced"} & set(line.replace(".", " ").split())
  assert "not tested" not in exp.scope([{"n_params": 162_000_000}])
