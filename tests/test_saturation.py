"""Saturation (Godey E1/E3/E4): the scaling-law fit, late-rise detection, and the quick
preset end to end on generated text (train, analyse, fit, figures, CSVs, report)."""

import math
import struct

import numpy as np
import pytest

from sbjax.studies import scaling
from tests._corpus import generated_docs, write_corpus


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
  from experiments.saturation import detect_rise

  steps = [0, 1, 2, 4, 8, 16, 32, 64]
  u = [5.0, 4.0, 3.5, 3.2, 3.1, 3.12, 3.2, 3.3]  # minimum at 8, then up by 0.2
  r = detect_rise(steps[::-1], u[::-1], tol=0.05)  # order of the rows does not matter
  assert (r["best_step"], r["final_step"], r["late_rise"]) == (8, 64, True)
  assert r["rise"] == pytest.approx(0.2)
  assert not detect_rise(steps, sorted(u, reverse=True), tol=0.05)["late_rise"]
  assert not detect_rise(steps, u, tol=0.25)["late_rise"]


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def quick(tmp_path_factory):
  from experiments import saturation

  root = tmp_path_factory.mktemp("saturation")
  corpus = write_corpus(root / "corpus", generated_docs(1, 16))
  saturation.run(root / "out", "quick", data=str(corpus), verbose=False)
  return root / "out", corpus


def _png_ok(path):
  b = path.read_bytes()
  assert b[:8] == b"\x89PNG\r\n\x1a\n", path
  w, h = struct.unpack(">II", b[16:24])
  assert w > 100 and h > 100


def test_quick_writes_figures_and_csvs(quick):
  from experiments import saturation
  from sbjax import checkpoint as ckpt
  from sbjax.analysis import read_csv

  out, _ = quick
  p = saturation.get_preset("quick")
  for name in saturation.FIGS.values():
    _png_ok(out / name)
  rows = read_csv(out / "saturation_runs.csv")
  assert [int(r["width"]) for r in rows] == list(p.widths)
  for r in rows:
    wd = out / "runs" / f"d{int(r['width'])}"
    assert ckpt.list_steps(wd)[-1] == p.steps
    # N counted from the checkpoint's own parameters: everything but embedding and head
    _, params, _ = ckpt.load_params(wd)
    n = sum(int(np.size(x)) for k, v in params.items() if k not in ("embed", "head")
            for x in __import__("jax").tree.leaves(v))
    assert int(r["n_nonembedding"]) == n
    # best / final / rise from the analysis CSV, by plain python
    a = [x for x in read_csv(wd / "analysis" / "metrics.csv")]
    final = max(a, key=lambda x: x["step"])
    best = min(a, key=lambda x: x["eval_loss"])
    assert r["final_eval_loss"] == final["eval_loss"]
    assert r["best_eval_loss"] == best["eval_loss"] and int(r["best_step"]) == best["step"]
    assert bool(r["late_rise"]) == (final["eval_loss"] - best["eval_loss"] > p.rise_tol)
    assert bool(r["in_fit"]) == (r["width"] >= p.fit_min_width)
    for key in ("final", "best"):
      assert r[f"gap_{key}_pct"] == pytest.approx(
          100 * (r[f"{key}_eval_loss"] - r[f"pred_{key}"]) / r[f"pred_{key}"], rel=1e-9)
  fits = {f["fit_on"]: f for f in read_csv(out / "saturation_fit.csv")}
  assert set(fits) == {"final", "best"}
  for key, f in fits.items():
    infit = [r for r in rows if r["in_fit"]]
    assert int(f["n_points"]) == len(infit) == 3
    pred = [f["A"] * r["n_nonembedding"] ** -f["alpha"] + f["E"] for r in infit]
    resid = [pr - r[f"{key}_eval_loss"] for pr, r in zip(pred, infit)]
    assert math.sqrt(np.mean(np.square(resid))) == pytest.approx(f["rmse"], abs=1e-9)


def test_report_section_reads_the_csv(quick):
  from experiments import saturation
  from sbjax.analysis import read_csv

  out, _ = quick
  text = saturation.report_section(out, "sat")
  assert text.startswith("## saturation")
  for name in saturation.FIGS.values():
    assert f"](sat/{name})" in text
  rows = {int(r["width"]): r for r in read_csv(out / "saturation_runs.csv")}
  table = [x for x in text.splitlines() if x.startswith("| ") and x[2].isdigit()]
  assert len(table) == len(rows)
  for line in table:
    cells = [c.strip() for c in line.strip("|").split("|")]
    r = rows[int(cells[0])]
    assert float(cells[2]) == pytest.approx(r["final_eval_loss"], abs=5e-5)
    assert float(cells[7]) == pytest.approx(r["gap_final_pct"], abs=5e-3)
  assert ("null result" in text) == (not any(r["late_rise"] for r in rows.values()))


def test_rerun_skips_finished_runs(quick):
  from experiments import saturation

  out, corpus = quick
  ck = out / "runs" / "d8" / "checkpoints"
  before = sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir())
  saturation.run(out, "quick", data=str(corpus), verbose=False)
  assert sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir()) == before


def test_tpu_and_cpu_presets_validate():
  from experiments import saturation
  from sbjax.config import DataConfig

  for name in ("cpu", "tpu"):
    p = saturation.get_preset(name)
    dc = DataConfig(source="tfds", tfds_name="lm1b", vocab_size=p.vocab)
    cfgs = saturation.run_configs(p, dc)
    assert [w for w, _ in cfgs] == list(p.widths)
    for w, c in cfgs:
      assert c.model.d_model == w and c.model.n_layers == p.n_layers
      assert c.train.ckpt_log_spaced and c.train.steps == p.steps
    assert sum(w >= p.fit_min_width for w in p.widths) >= 3
  with pytest.raises(ValueError, match="unknown saturation preset"):
    saturation.get_preset("huge")
