"""The collapse experiment's pre-registered rule and its report, on small tables (no training):
the pooled within-shape r against a regression on shape dummies, the rule's signs against the
authors' anchors, decide() both ways, and the trend reading of a grid that would have
triggered the old sign sentence (NC3's means positive, UNC3 against the authors)."""

import importlib
import json
import re
from dataclasses import asdict

import numpy as np
import pytest
from scipy import stats as sps

from experiments.collapse import tables as T
from experiments.collapse.presets import Rule
from experiments.common import write_rows

R = importlib.import_module("experiments.collapse.report")  # the package exports report()
SHAPES = [(1, 32), (2, 32), (1, 64), (2, 64), (1, 128), (2, 128)]


def test_within_shape_is_r_after_shape_dummies():
  """r of the residuals of x and y after least squares on one indicator per shape (a shape
  with one finite point drops out), and its interval with the shape means as controls."""
  rng = np.random.default_rng(0)
  rows = [{"n_layers": a, "d_model": b} for a, b in SHAPES for _ in range(4)]
  rows.append({"n_layers": 4, "d_model": 8})  # a shape of one point
  x, y = rng.normal(size=25), rng.normal(size=25)
  x[3] = np.nan
  w = T.within_shape(rows, x, y)
  keep = np.isfinite(x) & (np.arange(25) < 24)
  d = np.asarray([[(r["n_layers"], r["d_model"]) == s for s in SHAPES] for r in rows], float)[keep]
  res = [v[keep] - d @ np.linalg.lstsq(d, v[keep], rcond=None)[0] for v in (x, y)]
  r = np.corrcoef(*res)[0, 1]
  z, se = np.arctanh(r), 1 / np.sqrt(23 - 3 - 5)
  q = sps.norm.ppf(0.975)
  assert (w["within_n"], w["within_shapes"]) == (23, 6)
  assert w["within_r"] == pytest.approx(r, abs=1e-12)
  assert (w["within_ci_lo"], w["within_ci_hi"]) == pytest.approx(
      (np.tanh(z - q * se), np.tanh(z + q * se)), abs=1e-9)


def test_rule_signs_are_the_authors():
  """The rule's signs are the anchors' (computed from the authors' released table)."""
  assert all(T.ANCHORS[k][1] == s for k, s in Rule().signs)


def _grid(nc3, unc3, gnc2, noise=0.0, seed=0) -> list[dict]:
  """collapse_models.csv rows of a 12-run grid (6 shapes x 2 weight decays, snapshots at 1
  and 4 epochs, min_count 1 and 20): each metric a linear function of the loss."""
  rng, rows = np.random.default_rng(seed), []
  for i, (a, b) in enumerate(SHAPES):
    for lam in (0.0, 0.1):
      for e in (1, 4):
        loss = 4.0 - 0.2 * i - 0.5 * lam + 0.3 * (e == 1) + 0.01 * rng.normal()
        row = {"kind": "grid", "n_layers": a, "d_model": b, "n_params": 1000 * a * b,
               "last_snapshot": int(e == 4), "val_loss": loss, **{k: np.nan for k in T.METRICS}}
        for k, f in (("nc3_cos_mean", nc3), ("unc3_cos_cov", unc3), ("gnc2_log_kernel_mean", gnc2)):
          row[k] = f(loss - 3.5) + noise * rng.normal()
        rows += [{**row, "min_count": m} for m in (1, 20)]
  return rows


def _out(tmp_path, models) -> tuple:
  write_rows(tmp_path / "collapse_models.csv", models)
  r2 = T.r2_rows(models, (1, 20))
  write_rows(tmp_path / "collapse_r2.csv", r2)
  rule = Rule()
  s = {"rule": json.loads(json.dumps({"text": " ".join(Rule.__doc__.split()), **asdict(rule)})),
       "decision": T.decide(r2, rule)}
  return s, R.rule_lines(tmp_path, s) + R._tables(tmp_path)


REVERSED = (lambda u: 0.5 + 0.5 * u, lambda u: 1.5 - 1.0 * u, lambda u: -0.3 - 0.1 * u)


def test_trend_reversal_not_sign(tmp_path):
  """A grid where the better models are less self-dual and less uniform while NC3's means are
  positive (the old sentence blamed NC3's sign): the reversal is read as a trend, every cell
  reversed gives "reversals robust", each r with its n and the pooled within-shape r printed;
  a negative NC3 mean says UNC3 is not comparable; one metric's noise leaves it undecided."""
  s, lines = _out(tmp_path, _grid(*REVERSED))
  md = "\n".join(lines)
  assert s["decision"]["verdict"] == "reversals robust at small scale"
  for what in ("self-dual", "uniform in duality", "uniform on the sphere"):
    assert f"less {what} (reversed)" in md
  assert "a reversal of the trend, not of NC3's sign" in md and "24 of 24" in md
  assert not re.search(r"[+-]\d\.\d{3} \[[^]]*\](?!, n \d)", md)  # every r with its n
  assert not re.search(r"\| \d\.\d{3} \|", md)  # every R² with its n
  assert re.search(r"\d shapes", md)
  s, lines = _out(tmp_path, _grid(lambda u: 0.1 + 0.5 * u, *REVERSED[1:]))  # means below 0
  assert "not comparable" in "\n".join(lines)
  s, lines = _out(tmp_path, _grid(REVERSED[0], REVERSED[1], lambda u: -0.3, noise=0.05))
  d = s["decision"]
  assert d["verdict"] == "undecided" and "gnc2_log_kernel_mean@1 r" in d["reason"].split(
      "spanning 0")[1]


def test_decide_authors_side(tmp_path):
  """Every interval off 0 on the authors' side supports "regime"."""
  s, _ = _out(tmp_path, _grid(lambda u: 0.5 - 0.5 * u, lambda u: 1.5 + u, lambda u: -0.3 + 0.1 * u))
  assert s["decision"]["verdict"] == "supports regime"
  assert set(s["decision"]["cells"].values()) == {1}
