"""vocab_threshold's own math: the log-log fit of r* on V against numpy's least squares, the
slopes a rank grid allows against every corner, and the nested data fractions."""

import math
from itertools import product

import numpy as np
import pytest

from experiments.vocab_threshold.bigram import BigramNKnobs, fraction_streams
from experiments.vocab_threshold.rstar import loglog_fit, slope_range


def test_loglog_fit_matches_lstsq():
  rng = np.random.default_rng(0)
  v = np.array([512, 1024, 2048, 4096, 8192])
  r = np.round(3.0 * v ** 0.4 * np.exp(rng.normal(0, 0.2, v.size)))
  fit = loglog_fit(v, r)
  a = np.stack([np.log(v), np.ones(v.size)], axis=1)  # y = beta x + c, normal equations
  coef, ssr, *_ = np.linalg.lstsq(a, np.log(r), rcond=None)
  se = math.sqrt(float(ssr[0]) / (v.size - 2) * np.linalg.inv(a.T @ a)[0, 0])
  assert fit["beta"] == pytest.approx(coef[0], rel=1e-10)
  assert fit["log_c"] == pytest.approx(coef[1], rel=1e-10)
  assert fit["beta_se"] == pytest.approx(se, rel=1e-10) and fit["n"] == 5


def test_slope_range_against_every_corner():
  v, grid = [256, 512, 1024, 2048], ["32", "48", "64", "128"]
  r_star = [48, 64, 128, 64]  # each r* lies in (the grid rank below, r*]
  lo = [32, 48, 64, 48]
  corners = [loglog_fit(v, r)["beta"] for r in product(*zip(lo, r_star))]
  got = slope_range(v, [grid] * 4, r_star)
  assert got == pytest.approx([min(corners), max(corners)], abs=1e-12)
  assert slope_range(v, [grid] * 4, [32] * 4)[1] == pytest.approx(  # below the grid: (1, 32]
      max(loglog_fit(v, r)["beta"] for r in product(*[(1, 32)] * 4)))


def test_fractions_are_nested_blocks_spread_over_the_stream():
  tok = np.arange(10_000)
  parts = {f: fraction_streams(tok, f, period=4, block=100) for f in (0.25, 0.5, 1.0)}
  assert np.array_equal(np.concatenate(parts[1.0]), tok)
  assert {f: sum(len(s) for s in p) for f, p in parts.items()} == {0.25: 2500, 0.5: 5000,
                                                                   1.0: 10_000}
  starts = {f: {int(s[0]) for s in p} for f, p in parts.items()}
  assert starts[0.25] < starts[0.5] < starts[1.0] and max(starts[0.25]) >= 9000
  with pytest.raises(ValueError, match="must be k/4"):
    BigramNKnobs(fractions=(0.3,), grid=(2,), max_iters=(1,))

