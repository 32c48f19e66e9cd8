"""sbjax.studies.welch against scipy's Welch t-test and its confidence interval."""

import math

import numpy as np
import pytest
from scipy import stats

from sbjax.studies.welch import welch


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_equals_scipy(seed):
  rng = np.random.default_rng(seed)
  a, b = rng.normal(1.0, 0.1, 5), rng.normal(1.05, 0.3, 4)
  w = welch(a, b)
  t = stats.ttest_ind(b, a, equal_var=False)
  lo, hi = t.confidence_interval(0.95)
  assert w["diff"] == pytest.approx(b.mean() - a.mean(), rel=1e-12)
  assert (w["lo"], w["hi"]) == pytest.approx((lo, hi), rel=1e-9)
  assert w["dof"] == pytest.approx(t.df, rel=1e-9)


def test_verdicts_both_ways():
  assert welch([1.0, 1.01, 0.99], [2.0, 2.02, 1.98])["verdict"] == "supported"  # a lower
  assert welch([2.0, 2.02, 1.98], [1.0, 1.01, 0.99])["verdict"] == "refuted"
  assert welch([1.0, 1.2, 0.9], [1.05, 0.95, 1.15])["verdict"] == "undecided"
  one = welch([1.0], [2.0, 2.1])
  assert one["verdict"] == "undecided" and math.isnan(one["lo"])
  same = welch([1.0, 1.0], [2.0, 2.0])  # no seed variance: the point difference
  assert same["lo"] == same["hi"] == 1.0 and same["verdict"] == "supported"
  with pytest.raises(ValueError, match="at least one value"):
    welch([], [1.0])
