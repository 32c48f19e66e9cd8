"""The saturation experiment's statistics on constructed data: the late-rise statistic with its
paired bootstrap, the scaling-law fit and the CIs of the gaps to it, the planted arms' account
and seed spread (against scipy) and the svd floor bound (against the fitted floors)."""

import math

import numpy as np
import pytest
from scipy import stats

from experiments.saturation import planted
from experiments.saturation import rise as R
from experiments.saturation import scaling
from experiments.saturation.planted_measure import account, svd_bounds
from experiments.saturation.summary import fit_rows, gap_cis
from sbjax.data.planted_tail import PlantedTail
from sbjax.studies import floor as floor_lib

STEPS = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(750, 5001, 250)))
TOTAL = 5000


def series(bump: float, seed: int = 0, w: int = 64, noise: float = 0.02):
  """K x W losses: a decay to 1.0, large fixed window effects (paired), small per-checkpoint
  noise, plus a bump of height ``bump`` at 60-80% of training."""
  rng = np.random.default_rng(seed)
  base = 1.0 + 4.0 * np.exp(-STEPS / 300.0)
  bumpk = bump * np.exp(-0.5 * ((STEPS - 0.7 * TOTAL) / (0.05 * TOTAL)) ** 2)
  win = rng.normal(0, 0.5, size=(1, w))
  return (base + bumpk)[:, None] + win + rng.normal(0, noise, size=(len(STEPS), w))


def test_rise_on_flat_and_bumped_series():
  for seed in range(3):
    r = R.rise_test(STEPS, series(0.0, seed), TOTAL, n_boot=500, seed=seed)
    assert r["verdict"] == "no" and r["onset_step"] is None, r
    assert 0 <= r["rise"] < 0.02 and r["ci_lo"] <= r["rise"] <= r["ci_hi"] + 1e-12
  r = R.rise_test(STEPS, series(0.08), TOTAL, n_boot=500)
  assert r["verdict"] == "yes" and r["ci_lo"] >= 0.02, r
  assert r["rise"] == pytest.approx(0.08, abs=0.01)
  assert 0.6 * TOTAL <= r["onset_step"] <= 0.7 * TOTAL and r["peak_step"] == 3500
  assert R.rise_test(STEPS, series(0.02), TOTAL, n_boot=500)["verdict"] == "inconclusive"
  early = series(0.0)  # a transient before 30% of training does not count
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


@pytest.mark.parametrize("a,alpha,e", [(50.0, 0.4, 1.5), (3e3, 0.9, 0.0), (8.0, 0.07, 3.2)])
def test_fit_recovers_the_law(a, alpha, e):
  n = np.geomspace(1e3, 1e8, 9)
  loss = a * n ** -alpha + e
  f = scaling.fit_power_law(n, loss)
  assert (f.A, f.alpha, f.E) == pytest.approx((a, alpha, e), rel=1e-5, abs=1e-6)
  assert f.rmse < 1e-8
  f3 = scaling.fit_power_law(n[[1, 4, 7]], loss[[1, 4, 7]])  # 3 points: an exact solve
  np.testing.assert_allclose(f3.predict(n), loss, rtol=1e-6)
  with pytest.raises(ValueError, match="needs >= 3 points"):
    scaling.fit_power_law(n[:2], loss[:2])
  with pytest.raises(ValueError, match="finite"):
    scaling.fit_power_law(n[:3], [3.0, math.nan, 2.0])


WIDTHS = (16, 32, 48, 64, 96, 128, 192, 256)


def _widths(losses: np.ndarray, w: int = 48, seed: int = 0):
  """Rows of a width sweep whose final window losses scatter around ``losses`` (paired)."""
  rng = np.random.default_rng(seed)
  win = losses[:, None] + rng.normal(0, 0.05, size=(1, w)) + rng.normal(0, 0.002, (len(losses), w))
  win -= win.mean(1, keepdims=True) - losses[:, None]
  rows = [{"width": d, "n_nonembedding": 12.0 * d * d, "n_with_head": 12.0 * d * d + 1024 * d,
           "final_eval_loss": float(x), "best_eval_loss": float(x) - 0.01}
          for d, x in zip(WIDTHS, losses)]
  return rows, list(win)


def test_gaps_to_the_law_and_their_cis():
  """The widths below the fit 4% above the law in N without the head: their gaps are +4%, in
  their CIs, which lie above 0; the fitted widths' gaps are 0; the rmse is the fitted points'."""
  n = 12.0 * np.array(WIDTHS, float) ** 2
  small = np.array(WIDTHS) < 48
  rows, finals = _widths((30 * n ** -0.3 + 2.0) * np.where(small, 1.04, 1.0))
  rows, fits = fit_rows(rows, fit_min_width=48)
  gap_cis(rows, finals, n_boot=200)
  assert [f["fit_on"] for f in fits] == ["final", "best", "final_with_head"]
  assert fits[0]["widths"] == "48+64+96+128+192+256" and fits[0]["rmse"] < 1e-9
  for r in rows:
    g = 100 * (r["final_eval_loss"] - r["pred_final"]) / r["pred_final"]
    assert r["gap_final_pct"] == pytest.approx(g) == pytest.approx(4.0 if r["width"] < 48 else 0,
                                                                   abs=1e-5)
    assert r["gap_final_ci_lo"] <= r["gap_final_pct"] <= r["gap_final_ci_hi"]
    assert (r["gap_final_ci_lo"] > 0) == (r["width"] < 48)
    assert math.isfinite(r["gap_final_with_head_ci_lo"])
  rows, fits = fit_rows(_widths(np.linspace(3, 2, 8))[0][:2], fit_min_width=16)
  assert all(math.isnan(f["A"]) for f in fits) and math.isnan(rows[0]["gap_final_pct"])


def test_account_rules():
  def arm(d, g, v):
    return {"d": d, "gamma_total": g, "rise_verdict": v}
  grid = [(8, 7.9), (16, 7.9), (64, 7.9), (8, 2.4), (64, 2.4)]
  assert account([arm(d, g, "yes" if d <= 16 else "no") for d, g in grid]) == "width"
  assert account([arm(d, g, "yes" if g > 5 else "no") for d, g in grid]) == "gamma"
  assert account([arm(d, g, "no") for d, g in grid]) == "neither"
  assert account([arm(d, g, "yes" if d == 64 else "no") for d, g in grid]) == "mixed"
  assert account([arm(8, 7.9, "inconclusive"), arm(64, 2.4, "no")]) == "inconclusive"


def test_seed_spread_against_scipy():
  rises = [(0.0119, 0.0104, 0.0136), (0.0031, 0.0020, 0.0050), (0.0080, 0.0061, 0.0101)]
  arms = [{"vocab": 256, "zipf": 1.0, "d": 64, "weight_decay": 0.1, "dtype": "float32",
           "seed": s, "rise": r, "rise_ci_lo": lo, "rise_ci_hi": hi}
          for s, (r, lo, hi) in enumerate(rises)]
  arms.append({**arms[0], "d": 8})  # one seed: no spread
  (s,) = planted.replicates(arms)
  r = np.array([x[0] for x in rises])
  ci = stats.ttest_1samp(r, 0.0).confidence_interval(0.95)
  assert (s["t_lo"], s["t_hi"]) == pytest.approx((ci.low, ci.high))
  assert s["sd"] == pytest.approx(np.std(r, ddof=1)) and s["seeds"] == [0, 1, 2]
  assert s["half"] == pytest.approx(np.mean([(hi - lo) / 2 for _, lo, hi in rises]))


def test_svd_bound_brackets_the_fitted_floor():
  tail = PlantedTail(vocab=12, rank=2, n_mix=2, seed=3)
  p, pi = tail.probs, tail.stationary / tail.stationary.sum()
  rows = svd_bounds(tail, [1, 2, 4, 12])
  fitted = {r.rank: r.value for r in floor_lib.floor_curve(tail, [1, 2, 4], gtol=1e-7,
                                                           n_random=1, n_wide=0)}
  for row in rows:
    x, y = floor_lib.svd_start(p, pi, row["rank"])  # its own SVD
    assert row["floor"] == pytest.approx(floor_lib.objective(x @ y.T, p, pi)[0], rel=1e-12)
    if row["rank"] in fitted:
      assert row["floor"] >= fitted[row["rank"]] - 1e-9 >= row["H"] - 1e-9
  assert rows[-1]["floor"] == pytest.approx(tail.entropy, abs=1e-9)  # full rank: H


def test_population_presets_group_by_shape():
  gpu = planted.PRESETS["gpu"].knobs
  gs = planted.groups(gpu)
  assert [n for n, _ in gs] == ["d32-bf16", "d128-bf16", "d512-bf16"]
  assert all({a.d for a in arms} == {int(n[1:].split("-")[0])} and
             {a.weight_decay for a in arms} == {0.1, 0.03} for n, arms in gs)
  assert [len(a) for _, a in planted.groups(planted.PRESETS["cpu"].knobs)] == [1] * 6
