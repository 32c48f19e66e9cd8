"""scaling.bootstrap_gap: the paired bootstrap over validation windows of the gap to the law."""

import numpy as np
import pytest

from sbjax.studies import scaling


def test_bootstrap_gap_covers_the_planted_gap():
  rng = np.random.default_rng(0)
  n = np.geomspace(1e4, 1e7, 7)
  law = 20.0 * n ** -0.3 + 1.8
  truth = law.copy()
  truth[0] *= 1.05  # the smallest model lies 5% above the law of the others
  w = 48
  win = rng.normal(0, 0.3, size=(1, w))  # window difficulty, shared by every model (paired)
  losses = truth[:, None] + win - win.mean() + rng.normal(0, 0.01, size=(len(n), w))
  infit = np.arange(len(n)) > 0
  g = scaling.bootstrap_gap(n, losses, infit, n_boot=40, seed=1)
  assert g["n_ok"] == 40
  assert g["lo"][0] < 5.0 < g["hi"][0] and g["lo"][0] > 3.0  # 5% gap, CI excludes 0
  point = scaling.fit_power_law(n[infit], losses.mean(1)[infit], grid=100).gap_pct(
      losses.mean(1), n)
  np.testing.assert_allclose(g["gap_pct"], point)
  assert np.all(g["lo"] <= g["gap_pct"] + 1e-9) and np.all(g["gap_pct"] <= g["hi"] + 1e-9)
  with pytest.raises(ValueError, match="needs >= 3 points"):
    scaling.bootstrap_gap(n[:3], losses[:3], [True, True, False], n_boot=5)
