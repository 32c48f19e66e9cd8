"""The statistics of sbjax.studies, each against an independent reference: the Fisher-z
interval (scipy's ``pearsonr(...).confidence_interval``), the partial correlation (Pearson r
of numpy least-squares residuals), Welch's interval (scipy's ``ttest_ind``) and the paired
bootstrap of the gap to a scaling law (a planted 5% gap)."""

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from sbjax.studies import scaling, stats
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
  with pytest.raises(ValueError, match="level must lie in"):
    stats.fisher_ci(0.5, 10, level=95)
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
  assert stats.partial_correlation(x, y, z) == pytest.approx(
      _residual_r(x[keep], y[keep], z[keep]), abs=1e-12)
  assert math.isnan(stats.partial_correlation(x, y, np.ones(15)))  # a constant control
  with pytest.raises(ValueError, match="same length"):
    stats.partial_correlation(x, y, z[:3])


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


def test_bootstrap_gap_covers_a_planted_gap():
  rng = np.random.default_rng(0)
  n = np.geomspace(1e4, 1e7, 7)
  truth = 20.0 * n ** -0.3 + 1.8
  truth[0] *= 1.05  # the smallest model lies 5% above the law of the others
  win = rng.normal(0, 0.3, size=(1, 48))  # window difficulty, shared by every model (paired)
  losses = truth[:, None] + win - win.mean() + rng.normal(0, 0.01, size=(len(n), 48))
  infit = np.arange(len(n)) > 0
  g = scaling.bootstrap_gap(n, losses, infit, n_boot=40, seed=1)
  assert g["n_ok"] == 40 and 3.0 < g["lo"][0] < 5.0 < g["hi"][0]
  point = scaling.fit_power_law(n[infit], losses.mean(1)[infit], grid=100).gap_pct(
      losses.mean(1), n)
  np.testing.assert_allclose(g["gap_pct"], point)
  assert np.all(g["lo"] <= g["gap_pct"] + 1e-9) and np.all(g["gap_pct"] <= g["hi"] + 1e-9)
  with pytest.raises(ValueError, match="needs >= 3 points"):
    scaling.bootstrap_gap(n[:3], losses[:3], [True, True, False], n_boot=5)
