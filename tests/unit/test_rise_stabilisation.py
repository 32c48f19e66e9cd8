"""The late-rise statistic with its paired bootstrap (sbjax.studies.rise) against constructed
series."""

import numpy as np
import pytest

from sbjax.studies import rise as R

STEPS = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(750, 5001, 250)))
TOTAL = 5000


def series(bump: float, seed: int = 0, w: int = 64, noise: float = 0.02):
  """K x W expected losses: a decay to 1.0, large fixed window effects (paired), small
  per-checkpoint noise, plus a bump of height ``bump`` at 60-80% of training."""
  rng = np.random.default_rng(seed)
  base = 1.0 + 4.0 * np.exp(-STEPS / 300.0)
  bumpk = bump * np.exp(-0.5 * ((STEPS - 0.7 * TOTAL) / (0.05 * TOTAL)) ** 2)
  win = rng.normal(0, 0.5, size=(1, w))
  return (base + bumpk)[:, None] + win + rng.normal(0, noise, size=(len(STEPS), w))


def test_no_rise_on_flat_noisy_series():
  for seed in range(3):
    r = R.rise_test(STEPS, series(0.0, seed), TOTAL, n_boot=500, seed=seed)
    assert r["verdict"] == "no", r
    assert 0 <= r["rise"] < 0.02 and r["ci_lo"] <= r["rise"] <= r["ci_hi"] + 1e-12
    assert r["onset_step"] is None


def test_rise_on_planted_bump():
  r = R.rise_test(STEPS, series(0.08), TOTAL, n_boot=500)
  assert r["verdict"] == "yes" and r["ci_lo"] >= 0.02, r
  assert r["rise"] == pytest.approx(0.08, abs=0.01)
  assert 0.6 * TOTAL <= r["onset_step"] <= 0.7 * TOTAL and r["peak_step"] == 3500
  # a bump of the size of the threshold is not called either way
  assert R.rise_test(STEPS, series(0.02), TOTAL, n_boot=500)["verdict"] == "inconclusive"
  # an early transient (before 30%) does not count: the same bump moved to 10-20%
  early = series(0.0)
  early[(STEPS >= 500) & (STEPS <= 1000)] += 0.1
  assert R.rise_test(STEPS, early, TOTAL, n_boot=200)["verdict"] == "no"


def test_rise_statistic_and_bins_by_hand():
  v = np.array([3.0, 2.0, 2.5, 1.0, 1.5, 1.2])
  np.testing.assert_allclose(R.excess_over_running_min(v), [0, 0, 0.5, 0, 0.5, 0.2])
  assert R.rise_statistic([0, 1, 2, 3, 4, 5], v, total=6, after=0.5) == 0.5
  assert R.rise_statistic([0, 1, 2, 3, 4, 5], v, total=10, after=0.5) == pytest.approx(0.2)
  with pytest.raises(ValueError, match="no checkpoint at or after"):
    R.rise_statistic([0, 1], [1.0, 2.0], total=10)
  np.testing.assert_allclose(R.binned_means([0, 1, 2, 3, 4, 5], [6, 5, 4, 3, 2, 1], [0, 2, 5, 8]),
                             [6, 4.5, 2, np.nan])

