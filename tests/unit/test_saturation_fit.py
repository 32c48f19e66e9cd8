"""Saturation (Godey E1/E3/E4), pure pieces: the scaling-law fit, late-rise detection, the
per-width fit columns (gap to the law), and the presets' configs (validated, not run)."""

import math

import numpy as np
import pytest

from experiments import saturation
from sbjax.config import DataConfig
from sbjax.studies import scaling


# ----------------------------------------------------------------------------- scaling fit
@pytest.mark.parametrize("a,alpha,e", [(50.0, 0.4, 1.5), (3e3, 0.9, 0.0), (8.0, 0.07, 3.2)])
def test_fit_recovers_parameters(a, alpha, e):
  n = np.geomspace(1e3, 1e8, 9)
  loss = a * n ** -alpha + e
  f = scaling.fit_power_law(n, loss)
  assert f.A == pytest.approx(a, rel=1e-5)
  assert f.alpha == pytest.approx(alpha, rel=1e-6)
  assert f.E == pytest.approx(e, abs=1e-6)
  assert f.rmse < 1e-8
  # three points, three parameters: an exact solve
  f3 = scaling.fit_power_law(n[[1, 4, 7]], loss[[1, 4, 7]])
  np.testing.assert_allclose(f3.predict(n), loss, rtol=1e-6)


def test_fit_with_noise_and_gap():
  rng = np.random.default_rng(0)
  n = np.geomspace(1e4, 1e9, 12)
  loss = 20.0 * n ** -0.3 + 1.8
  noisy = loss * (1 + 1e-3 * rng.standard_normal(n.size))
  f = scaling.fit_power_law(n, noisy)
  assert f.alpha == pytest.approx(0.3, rel=0.05)
  assert f.E == pytest.approx(1.8, abs=0.05)
  # gap_pct is the relative excess over the prediction, in percent
  pred = 20.0 * 1e3 ** -0.3 + 1.8
  exact = scaling.ScalingFit(A=20.0, alpha=0.3, E=1.8, n_points=0, rmse=0.0)
  assert float(exact.gap_pct(pred * 1.05, 1e3)) == pytest.approx(5.0)


def test_fit_bad_input():
  with pytest.raises(ValueError, match="needs >= 3 points"):
    scaling.fit_power_law([1e3, 1e4], [3.0, 2.5])
  with pytest.raises(ValueError, match="finite"):
    scaling.fit_power_law([1e3, 1e4, 1e5], [3.0, math.nan, 2.0])
  with pytest.raises(ValueError, match="N must be > 0"):
    scaling.fit_power_law([0, 1e4, 1e5], [3.0, 2.5, 2.0])


def test_detect_rise():
  steps = [0, 1, 2, 4, 8, 16, 32, 64]
  u = [5.0, 4.0, 3.5, 3.2, 3.1, 3.12, 3.2, 3.3]  # minimum at 8, then up by 0.2
  r = saturation.detect_rise(steps[::-1], u[::-1], tol=0.05)  # row order does not matter
  assert (r["best_step"], r["final_step"], r["late_rise"]) == (8, 64, True)
  assert r["rise"] == pytest.approx(0.2)
  assert not saturation.detect_rise(steps, sorted(u, reverse=True), tol=0.05)["late_rise"]
  assert not saturation.detect_rise(steps, u, tol=0.25)["late_rise"]
  with pytest.raises(ValueError, match="diverged"):
    saturation.detect_rise([0, 1], [math.nan, math.inf], tol=0.1)


def test_fit_rows_gaps_and_rmse():
  """Four widths, the three largest in the fit (the quick preset's end-to-end check of the
  fit columns, on synthetic losses): n_points, rmse of the fitted points, the gap formula."""
  n = np.array([2e3, 1e4, 5e4, 2.5e5])
  final = 30.0 * n ** -0.35 + 2.0 + np.array([0.3, 0.01, -0.01, 0.005])
  rows = [{"width": w, "n_nonembedding": float(x), "final_eval_loss": float(f),
           "best_eval_loss": float(f - 0.05)} for w, x, f in zip((8, 16, 32, 64), n, final)]
  rows, fits = saturation.fit_rows(rows, fit_min_width=16)
  assert [r["in_fit"] for r in rows] == [0, 1, 1, 1]
  assert [f["fit_on"] for f in fits] == ["final", "best"]
  for f in fits:
    key = f["fit_on"]
    infit = [r for r in rows if r["in_fit"]]
    assert int(f["n_points"]) == len(infit) == 3 and f["widths"] == "16+32+64"
    pred = [f["A"] * r["n_nonembedding"] ** -f["alpha"] + f["E"] for r in infit]
    resid = [pr - r[f"{key}_eval_loss"] for pr, r in zip(pred, infit)]
    assert math.sqrt(np.mean(np.square(resid))) == pytest.approx(f["rmse"], abs=1e-9)
    for r in rows:
      assert r[f"gap_{key}_pct"] == pytest.approx(
          100 * (r[f"{key}_eval_loss"] - r[f"pred_{key}"]) / r[f"pred_{key}"], rel=1e-9)
  assert rows[0]["gap_final_pct"] > 1  # the small width lies above the law
  rows2, fits2 = saturation.fit_rows([dict(r) for r in rows[:2]], fit_min_width=8)
  assert all(math.isnan(f["A"]) for f in fits2) and math.isnan(rows2[0]["gap_final_pct"])


def test_presets_validate():
  for name in ("cpu", "tpu", "quick", "test"):
    p = saturation.get_preset(name)
    k = p.knobs
    dc = DataConfig(source="tfds", options=dict(name="lm1b",
                                                vocab_size=p.overrides["data.options.vocab_size"]))
    cfgs = saturation.run_configs(p, dc)
    assert [w for w, _ in cfgs] == list(k.widths)
    for w, c in cfgs:
      assert c.model.d_model == w and c.model.n_layers == p.overrides["model.n_layers"]
      assert c.train.ckpt_log_spaced and c.train.steps == p.overrides["train.steps"]
      assert c.data == dc and c.name == f"saturation-d{w}"
    if name in ("cpu", "tpu"):
      assert sum(w >= k.fit_min_width for w in k.widths) >= 3
  test, quick = saturation.get_preset("test"), saturation.get_preset("quick")
  assert len(test.knobs.widths) <= len(quick.knobs.widths)
  assert test.overrides["train.steps"] < quick.overrides["train.steps"]
  with pytest.raises(ValueError, match="unknown saturation preset"):
    saturation.get_preset("huge")
