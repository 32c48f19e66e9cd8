"""The scaling fit of the saturation experiment (Godey Fig. 1b, issue 33 item 7): the gap CIs
with N counted without and with the head (``measure.gap_cis`` on window losses built from a
known law), and the generated paragraph (``scaling_reading``) checked against its rows both
ways: supported, refuted, undecided, and a verdict that depends on the count."""

import math

import numpy as np
import pytest

from experiments import saturation
from experiments.saturation.measure import gap_cis
from experiments.saturation.report import claims_text
from experiments.saturation.scaling_reading import gap_verdict, scaling_paragraph

WIDTHS = (16, 32, 48, 64, 96, 128)
N_NE = np.array([24 * w * w for w in WIDTHS], float)  # 2 layers x 12 d^2
N_H = N_NE + 1024 * np.array(WIDTHS, float)  # + the d x V head


def windows(tmp_path, means, seed=0, w=64):
  """One workdir per width whose windows.npz holds window losses with exactly these means: a
  noise shared by every width (0.3 nats, paired windows) plus an own one (0.01)."""
  rng = np.random.default_rng(seed)
  common = rng.normal(0, 0.3, w)
  wds = []
  for d, m in zip(WIDTHS, means):
    x = common + rng.normal(0, 0.01, w)
    wd = tmp_path / f"d{d}"
    wd.mkdir(parents=True)
    np.savez(wd / "windows.npz", loss_KxW=np.stack([x + 5.0, x - x.mean() + m]))
    wds.append(wd)
  return wds


def measured(tmp_path, means):
  rows = [{"width": d, "n_nonembedding": float(a), "n_with_head": float(b), "final_eval_loss": m,
           "best_eval_loss": m, "n_layers": 2, "vocab_size": 1024, "steps": 1200}
          for d, a, b, m in zip(WIDTHS, N_NE, N_H, means)]
  rows, fits = saturation.fit_rows(rows, fit_min_width=48)
  gap_cis(rows, windows(tmp_path, means), saturation.Knobs(widths=WIDTHS, fit_min_width=48,
                                                           n_boot=200))
  return rows, {f["fit_on"]: f for f in fits}


def test_gap_cis_recover_the_planted_gap_under_each_count(tmp_path):
  """Small widths 4% above the law in N without the head: that count's CIs hold +4 and clear
  0; small widths 4% below the law in N with the head: that count's CIs hold -4, below 0."""
  small = np.array([w < 48 for w in WIDTHS])
  above = (30 * N_NE ** -0.3 + 2.0) * np.where(small, 1.04, 1.0)
  rows, fits = measured(tmp_path / "a", above)
  for r in rows:
    lo, hi, g = r["gap_final_ci_lo"], r["gap_final_ci_hi"], r["gap_final_pct"]
    assert g == pytest.approx(4.0 if r["width"] < 48 else 0.0, abs=1e-5)
    assert lo <= g <= hi  # the planted gap lies in its CI
    assert (lo > 0) == (r["width"] < 48)
    assert math.isfinite(r["gap_final_with_head_ci_lo"])
  below = (12 * N_H ** -0.25 + 2.5) * np.where(small, 0.96, 1.0)
  rows, fits = measured(tmp_path / "b", below)
  for r in rows[:2]:
    assert r["gap_final_with_head_pct"] == pytest.approx(-4.0, abs=1e-5)
    assert r["gap_final_with_head_ci_lo"] <= -4.0 <= r["gap_final_with_head_ci_hi"] < 0
  assert "With N with the head's parameters" in (t := scaling_paragraph(rows, fits, {}))
  assert "d=16 -4.00% [" in t.split("With N with the head's")[1]


def row(width, in_fit, gap, lo, hi, gap_h, lo_h, hi_h):
  return {"width": width, "in_fit": in_fit, "n_layers": 2, "vocab_size": 1024, "steps": 1200,
          "gap_final_pct": gap, "gap_final_ci_lo": lo, "gap_final_ci_hi": hi,
          "gap_final_with_head_pct": gap_h, "gap_final_with_head_ci_lo": lo_h,
          "gap_final_with_head_ci_hi": hi_h}


FIT = {"A": 40.0, "alpha": 0.3, "E": 2.0, "rmse": 0.004, "n_points": 6,
       "widths": "48+64+96+128+192+256"}
FITS = {"final": FIT, "final_with_head": {**FIT, "alpha": 0.5}}
META = {"overrides": {"train.steps": 1200, "train.batch_size": 16, "train.seq_len": 64,
                      "train.lr": 3e-3},
        "knobs": {"eval_sequences": 64, "n_boot": 1000},
        "data": {"epochs": 0.58, "train_tokens": 2_100_000}}


def rows_with(ci, ci_h):
  big = [row(w, 1, 0.0, -0.1, 0.1, 0.0, -0.1, 0.1) for w in (48, 64, 96, 128, 192, 256)]
  return [row(16, 0, *ci[0], *ci_h[0]), row(32, 0, *ci[1], *ci_h[1])] + big


def verdict(text):
  return text.split("Verdict: ")[1].split(". Scope")[0]


def test_paragraph_both_ways():
  up, down, span0 = [(2.0, 1.0, 3.0)] * 2, [(-2.0, -3.0, -1.0)] * 2, [(0.5, -1.0, 2.0)] * 2
  t = scaling_paragraph(rows_with(up, up), FITS, META)
  assert verdict(t) == "supported"
  assert "d=16 +2.00% [+1.00, +3.00]" in t and "L = 40 / N^0.3000 + 2.0000" in t
  assert "6 points, 3 residual degrees of freedom" in t
  assert verdict(scaling_paragraph(rows_with(down, down), FITS, META)) == "refuted"
  assert verdict(scaling_paragraph(rows_with(span0, span0), FITS, META)) == "undecided"
  # one small width above and one below: the widths disagree, undecided
  assert verdict(scaling_paragraph(rows_with([up[0], down[0]], [up[0], down[0]]), FITS, META)) \
      == "undecided"
  t = scaling_paragraph(rows_with(up, down), FITS, META)
  assert verdict(t) == ("undecided: it depends on how N is counted (without the head: "
                        "supported, with the head: refuted)")
  # a gap inside the law's own residual on the fitted widths is not told from it: undecided
  rows = rows_with(up, up)
  rows[2].update(gap_final_pct=3.0, gap_final_with_head_pct=-0.5)
  t = scaling_paragraph(rows, FITS, META)
  assert "largest residual on the fitted widths, 3.00% (d=48): undecided" in t
  assert "largest residual on the fitted widths, 0.50% (d=48): supported" in t
  assert verdict(t).startswith("undecided: it depends")
  t = scaling_paragraph(rows_with(up, down), FITS, META)
  # the scope names the recipe, the tokens and what the CI covers
  assert "lr 0.003 (batch 16 × 64 tokens: 1,228,800 tokens per run, 0.58 epochs" in t
  assert "one seed per width" in t and "not seed variance" in t


def test_paragraph_without_fit_or_ci():
  t = scaling_paragraph(rows_with([(2.0, 1.0, 3.0)] * 2, [(2.0, math.nan, math.nan)] * 2),
                        {"final": FIT, "final_with_head": {**FIT, "alpha": math.nan,
                                                           "n_points": 2}}, {})
  assert "no fit (2 widths in the fit" in t
  assert verdict(t).startswith("undecided: it depends") and "with the head: undecided" in t
  one = [row(8, 1, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)]
  t = scaling_paragraph(one, {"final": {**FIT, "alpha": math.nan, "n_points": 1}}, {})
  assert verdict(t) == "undecided" and "every width is in the fit" in t
  assert gap_verdict([], []) == "undecided" and gap_verdict([0.1], [math.nan]) == "undecided"
  assert gap_verdict([1.0], [3.0], [2.0], misfit=1.5) == "supported"
  assert gap_verdict([1.0], [3.0], [2.0], misfit=2.5) == "undecided"
  assert gap_verdict([-3.0], [-1.0], [-2.0], misfit=1.5) == "refuted"


def test_claims_text_uses_the_same_rule():
  base = {"rise_verdict": "no", "kl_best": 0.3, "kl_final": 0.3, "anisotropy_final": 0.2,
          "gamma_total": 0.2}
  rows = [{**r, **base} for r in rows_with([(-2.0, -3.0, -1.0)] * 2, [(0.0, 0.0, 0.0)] * 2)]
  sup, con = claims_text(rows, paired=True).split("Contradicted:")
  assert "lie above the scaling law" in con and "lie above" not in sup
