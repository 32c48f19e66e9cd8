"""The saturation statistics on constructed data: rise and null, scaling fit, seed spread, rule."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from experiments.common import read_rows, write_rows
from experiments.saturation import planted
from experiments.saturation import rise as R
from experiments.saturation.planted_measure import null_and_peak, svd_bounds
from experiments.saturation.rise_rule import RiseRule, decide
from experiments.saturation.summary import (fit_power_law, fit_rows, gap_cis, loo_rows,
                                            scaling_verdict)
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
  f = fit_power_law(n, loss)
  assert (f.A, f.alpha, f.E) == pytest.approx((a, alpha, e), rel=1e-5, abs=1e-6)
  assert f.rmse < 1e-8
  f3 = fit_power_law(n[[1, 4, 7]], loss[[1, 4, 7]])  # 3 points: an exact solve
  np.testing.assert_allclose(f3.predict(n), loss, rtol=1e-6)
  with pytest.raises(ValueError, match="needs >= 3 points"):
    fit_power_law(n[:2], loss[:2])


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


def test_seed_spread_against_scipy():
  rises = [(0.0119, 0.0104, 0.0136), (0.0031, 0.0020, 0.0050), (0.0080, 0.0061, 0.0101)]
  arms = [{"vocab": 256, "zipf": 1.0, "d": 64, "weight_decay": 0.1, "dtype": "float32",
           "seed": s, "rise": r, "rise_ci_lo": lo, "rise_ci_hi": hi, "rise_above_null": s % 2}
          for s, (r, lo, hi) in enumerate(rises)]
  arms.append({**arms[0], "d": 8})  # one seed: no spread
  (s,) = planted.replicates(arms)
  r = np.array([x[0] for x in rises])
  ci = stats.ttest_1samp(r, 0.0).confidence_interval(0.95)
  assert (s["t_lo"], s["t_hi"]) == pytest.approx((ci.low, ci.high))
  assert s["sd"] == pytest.approx(np.std(r, ddof=1)) and s["seeds"] == [0, 1, 2]
  assert (s["min"], s["max"], s["n_above"]) == (r.min(), r.max(), 1)
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


def test_null_level_against_every_block_order():
  """Six checkpoints in blocks of 2: q = 1 (0) gives the largest (smallest) rise of the 6 block
  orders written out here, p their share ≥ R."""
  steps, total = np.arange(8), 8
  mean = np.array([5.0, 3.0, 2.0, 2.6, 1.5, 1.6, 1.9, 1.4])
  fit = np.r_[2.3, 2.3, [5 / 3] * 3, 1.4]  # the pooled adjacent violators, by hand
  y = mean[2:]
  local = np.array([y[max(0, i - 1):i + 1].mean() for i in range(6)])  # this and the previous
  noise = (y - local) * np.sqrt(2)
  null = [R.rise_statistic(steps, np.r_[mean[:2], fit + noise[np.r_[tuple(
      range(2 * b, 2 * b + 2) for b in o)]]], total) for o in itertools.permutations(range(3))]
  r = R.rise_statistic(steps, mean, total)
  kw = dict(after=0.25, n_perm=4000, block=2)
  assert R.null_level(steps, mean, total, q=1.0, **kw)["level"] == pytest.approx(max(null))
  assert R.null_level(steps, mean, total, q=0.0, **kw)["level"] == pytest.approx(min(null))
  assert R.null_level(steps, mean, total, **kw)["p"] == pytest.approx(
      np.mean(np.array(null) >= r - 1e-12), abs=0.03)


def _arm_rows(ramp: float, seed: int) -> list[dict]:
  """Checkpoint rows of ``series(0.0, seed)`` plus a climb of ``ramp`` nats over the last 40%
  of training (a sustained rise: longer than the null's blocks)."""
  up = ramp * np.clip((STEPS - 0.6 * TOTAL) / (0.4 * TOTAL), 0, 1)
  return [{"step": int(s), "kl_centred": 0.7, "anisotropy_last": 0.05,
           **{f"loss_w{w}": float(x) for w, x in enumerate(v)}}
          for s, v in zip(STEPS, series(0.0, seed) + up[:, None])]


def test_a_rise_against_its_null_level(tmp_path):
  """Three seeds of a noisy decay whose rise CIs lie above 0 do not rise above their null level
  (the rule refutes); a climb of 0.02 nats over the last 40% does."""
  k = planted.PRESETS["cpu-e1"].knobs
  arms = []
  for seed in range(3):
    write_rows(tmp_path / f"ck{seed}.csv", _arm_rows(0.0, seed))
    rows = read_rows(tmp_path / f"ck{seed}.csv")
    ci = R.rise_test(STEPS, np.array([[r[f"loss_w{w}"] for w in range(64)] for r in rows]),
                     TOTAL, n_boot=500)
    assert ci["ci_lo"] > 0  # what the bare count counted
    arms.append({"vocab": 1024, "zipf": 1.5, "d": 32, "weight_decay": 0.1, "dtype": "float32",
                 "seed": seed, "rise": ci["rise"], "rise_ci_lo": ci["ci_lo"],
                 "rise_ci_hi": ci["ci_hi"], **null_and_peak(rows, STEPS, TOTAL, k)})
    assert arms[-1]["rise"] <= arms[-1]["rise_null"] and not arms[-1]["rise_above_null"]
  (rep,) = planted.replicates(arms)
  assert (rep["n_above"], rep["n"]) == (0, 3)
  assert (rep["min"], rep["max"]) == (min(a["rise"] for a in arms), max(a["rise"] for a in arms))
  assert decide(arms, k.rule, 0.1)["verdict"] == "refutes"
  climb = null_and_peak(_arm_rows(0.02, 0), STEPS, TOTAL, k)
  assert climb["rise_above_null"] and climb["rise_p"] < 0.01


def _e1(rises: dict, above=lambda d, lam: True, jump: float = 1.5) -> list[dict]:
  """Arms of the E1 design: {(d, λ): [rise of each seed]}."""
  return [{"d": d, "weight_decay": lam, "rise": r, "rise_above_null": int(above(d, lam)),
           "kl_centred_jump": jump} for (d, lam), rs in rises.items() for r in rs]


def test_width_order_rule():
  """Each verdict of the rule from the E1 cells (d8, d32 x 3 seeds, d64 x 2 at λ 0.1, d32 x 2
  at λ 0.03)."""
  rule = RiseRule()
  falling = {(8, 0.1): [0.05, 0.052, 0.049], (32, 0.1): [0.03, 0.031, 0.029],
             (64, 0.1): [0.01, 0.012], (32, 0.03): [0.02, 0.021]}
  rising = {k: v[::-1] if k[0] != 32 else v for k, v in {
      (8, 0.1): [0.01, 0.011, 0.012], (32, 0.1): [0.03, 0.031, 0.029],
      (64, 0.1): [0.05, 0.052], (32, 0.03): [0.02, 0.021]}.items()}
  flat = {k: [0.02 + 0.001 * i for i in range(len(v))] for k, v in falling.items()}
  assert decide(_e1(falling, lambda d, lam: False), rule, 0.1)["verdict"] == "refutes"
  v = decide(_e1(falling), rule, 0.1)
  assert v["verdict"] == "supports" and v["falls"] and v["n"] == 8
  assert decide(_e1(falling, jump=0.2), rule, 0.1)["verdict"] == "undecided"
  assert decide(_e1(rising), rule, 0.1)["verdict"] == "optimiser"
  low_quiet = lambda d, lam: lam == 0.1  # noqa: E731
  assert decide(_e1(flat, low_quiet), rule, 0.1)["verdict"] == "optimiser"
  both = decide(_e1(falling, low_quiet), rule, 0.1)
  assert both["verdict"] == "undecided" and both["needs_gamma"] and both["falls"]


# the text arm of a run on Shakespeare (V 1024, 1200 steps): N without and with the head, the
# final eval loss and the gap CIs of the two widths below the fit
SWEEP = ((16, 6592, 22976, 4.2835, -6.37, -0.85, -5.05, -0.35),
         (32, 25472, 58240, 4.0964, -2.44, -0.77, -2.23, -0.66), (48, 56640, 105792, 4.0433),
         (64, 100096, 165632, 3.9563), (96, 223872, 322176, 3.8998),
         (128, 396800, 527872, 3.8414), (192, 890112, 1086720, 3.7416),
         (256, 1580032, 1842176, 3.7591))


def test_scaling_leave_one_out_verdict(tmp_path):
  """From a runs CSV where every small width's CI lies below 0, leaving d256 out moves d16's gap
  above 0: undecided; each left-out gap is the gap to a direct refit."""
  write_rows(tmp_path / "runs.csv", [
      {"width": w, "n_nonembedding": n, "n_with_head": nh, "final_eval_loss": x,
       "best_eval_loss": x, **dict(zip(("gap_final_ci_lo", "gap_final_ci_hi",
                                        "gap_final_with_head_ci_lo",
                                        "gap_final_with_head_ci_hi"), ci))}
      for w, n, nh, x, *ci in SWEEP])
  rows, _ = fit_rows(read_rows(tmp_path / "runs.csv"), fit_min_width=48)
  loo = loo_rows(rows)
  assert all(r["gap_final_ci_hi"] < 0 and r["gap_final_with_head_ci_hi"] < 0
             for r in rows[:2])  # the old rule's "refuted"
  d16 = rows[0]
  assert d16["gap_final_loo_lo"] < d16["gap_final_pct"] < 0 < d16["gap_final_loo_hi"]
  assert d16["gap_final_loo_hi_without"] == 256
  keep = [r for r in rows if r["in_fit"] and r["width"] != 256]
  law = fit_power_law([r["n_nonembedding"] for r in keep],
                              [r["final_eval_loss"] for r in keep])
  (x,) = [x for x in loo if (x["fit_on"], x["width"], x["left_out"]) == ("final", 16, 256)]
  assert x["gap_pct"] == pytest.approx(float(law.gap_pct(4.2835, 6592)))
  assert len(loo) == 2 * 2 * 6
  v = scaling_verdict(rows)
  assert v["verdict"] == "undecided" and v["loo_crosses_0"] == [16]
