"""The statistics of sbjax.studies against scipy, numpy least squares and exact enumeration."""

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from sbjax.studies import stats
from sbjax.studies.welch import welch

Z95 = 1.959963984540054


def test_fisher_interval_equals_scipy():
  rng = np.random.default_rng(0)
  x = rng.normal(size=12)
  y = 0.6 * x + rng.normal(size=12)
  r = float(stats.pearson(x, y))
  for level in (0.95, 0.9):
    ci = sps.pearsonr(x, y).confidence_interval(level)
    assert stats.fisher_ci(r, 12, level=level) == pytest.approx((ci.low, ci.high), abs=1e-12)
  s = stats.correlation_summary(x, y)
  assert (s["ci_lo"], s["ci_hi"]) == pytest.approx(stats.fisher_ci(r, 12), abs=1e-12)
  assert all(math.isnan(v) for v in stats.fisher_ci(0.5, 3))  # n - 3 = 0: undefined
  assert stats.fisher_ci(1.0, 10) == (1.0, 1.0)
  assert stats.ci_sign(0.1, 0.5) == 1 and stats.ci_sign(-0.5, -0.1) == -1
  assert stats.ci_sign(-0.83, 0.12) == 0  # an interval that spans 0 is undecided
  with warnings.catch_warnings():  # no finite pair: NaN, and numpy is not asked for an empty mean
    warnings.simplefilter("error")
    assert np.isnan(stats.finite_pearson([np.nan, 1.0], [1.0, np.nan]))
    assert np.isnan(stats.spearman([], [])) and all(np.isnan(stats.fisher_ci(np.nan, 0)))


def _residual_r(x, y, z):
  a = np.column_stack([np.ones_like(z), z])
  rx = x - a @ np.linalg.lstsq(a, x, rcond=None)[0]
  ry = y - a @ np.linalg.lstsq(a, y, rcond=None)[0]
  return float(np.corrcoef(rx, ry)[0, 1])


def test_partial_correlation_equals_the_residuals_correlation():
  rng = np.random.default_rng(1)
  z = np.log(rng.uniform(1e3, 1e6, size=15))  # log(parameters)
  x = 0.8 * z + rng.normal(size=15)
  y = -0.5 * z + 0.3 * x + rng.normal(size=15)
  ref = _residual_r(x, y, z)
  s = stats.partial_summary(x, y, z)
  assert s["n"] == 15 and s["partial_r"] == pytest.approx(ref, abs=1e-12)
  h = Z95 / math.sqrt(15 - 4)  # one control: n - 3 - 1
  assert (s["partial_ci_lo"], s["partial_ci_hi"]) == pytest.approx(
      (math.tanh(math.atanh(ref) - h), math.tanh(math.atanh(ref) + h)), abs=1e-12)
  x[2] = np.nan  # the triple is dropped
  keep = np.isfinite(x)
  assert stats.partial_summary(x, y, z)["partial_r"] == pytest.approx(
      _residual_r(x[keep], y[keep], z[keep]), abs=1e-12)
  assert math.isnan(stats.partial_summary(x, y, np.ones(15))["partial_r"])  # a constant control


def test_welch_interval_equals_scipy():
  rng = np.random.default_rng(0)
  a, b = rng.normal(1.0, 0.1, 5), rng.normal(1.05, 0.3, 4)
  w, t = welch(a, b), sps.ttest_ind(b, a, equal_var=False)
  assert w["diff"] == pytest.approx(b.mean() - a.mean(), rel=1e-12)
  assert (w["lo"], w["hi"]) == pytest.approx(tuple(t.confidence_interval(0.95)), rel=1e-9)
  assert w["dof"] == pytest.approx(t.df, rel=1e-9)
  assert welch([1.0, 1.01, 0.99], [2.0, 2.02, 1.98])["verdict"] == "supported"  # a lower
  assert welch([2.0, 2.02, 1.98], [1.0, 1.01, 0.99])["verdict"] == "refuted"
  assert welch([1.0, 1.2, 0.9], [1.05, 0.95, 1.15])["verdict"] == "undecided"
  one = welch([1.0], [2.0, 2.1])
  assert one["verdict"] == "undecided" and math.isnan(one["lo"])
  same = welch([1.0, 1.0], [2.0, 2.0])  # no seed variance: the point difference
  assert same["lo"] == same["hi"] == 1.0 and same["verdict"] == "supported"


def test_pearson_spearman_r2_match_scipy_with_one_nan_rule():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 12))
  y = 0.7 * x + rng.normal(size=(5, 12))
  r, r2 = stats.pearson(x, y), stats.r_squared(x, y)  # over the last axis
  for i in range(5):
    assert r[i] == pytest.approx(sps.pearsonr(x[i], y[i])[0], abs=1e-12)
    assert r2[i] == pytest.approx(sps.linregress(x[i], y[i]).rvalue ** 2, abs=1e-12)
  x = np.array([3.0, 1.0, np.nan, 4.0, 1.0, 5.0, 9.0, 2.0])  # the finite pairs only
  y = np.array([2.0, 7.0, 1.0, 1.0, 8.0, np.inf, 2.0, 8.0])
  ok = np.isfinite(x) & np.isfinite(y)
  assert stats.finite_pearson(x, y) == pytest.approx(sps.pearsonr(x[ok], y[ok])[0], abs=1e-12)
  assert stats.spearman(x, y) == pytest.approx(sps.spearmanr(x[ok], y[ok])[0], abs=1e-12)
  for f in (stats.finite_pearson, stats.spearman):  # < 3 finite pairs, a constant side
    assert math.isnan(f([1.0, 2.0, np.nan], [3.0, 1.0, 2.0]))
    assert math.isnan(f([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 5.0]))


def test_permutation_pvalue_exact_small_n():
  """Monte-Carlo p vs the exact p enumerated over all 7! permutations."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=7)
  y = 0.5 * x + rng.normal(size=7)
  r0 = abs(sps.pearsonr(x, y)[0])
  rs = np.array([abs(np.corrcoef(x, np.asarray(y)[list(p)])[0, 1])
                 for p in itertools.permutations(range(7))])
  p_exact = np.mean(rs >= r0 - 1e-12)
  n = 10_000
  p = stats.permutation_pvalue(x, y, n, seed=3)
  assert abs(p - p_exact) < 4 * math.sqrt(p_exact * (1 - p_exact) / n) + 2 / n


def test_spearman_test_against_every_pairing():
  x, y = [8, 8, 8, 32, 32, 64], [0.03, 0.01, 0.02, 0.015, 0.012, 0.004]
  rho, p = stats.spearman_test(x, y, 50_000)
  assert rho == pytest.approx(sps.spearmanr(x, y).statistic)
  null = [sps.spearmanr(x, [y[i] for i in o]).statistic for o in itertools.permutations(range(6))]
  assert p == pytest.approx(np.mean(np.abs(null) >= abs(rho) - 1e-12))
  assert all(math.isnan(v) for v in stats.spearman_test([1, 2, 3], [1, 1, 1]))
