"""experiments/collapse (Wu & Papyan 2024), pure pieces: the statistics of the R² tables
(Pearson, R², permutation p-values) and the presets (validated, not run)."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from experiments import collapse
from sbjax.studies import stats


def test_pearson_r2_match_scipy():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 12))
  y = 0.7 * x + rng.normal(size=(5, 12))
  r, r2 = stats.pearson(x, y), stats.r_squared(x, y)
  for i in range(5):
    lr = sps.linregress(x[i], y[i])
    assert r[i] == pytest.approx(sps.pearsonr(x[i], y[i])[0], abs=1e-12)
    assert r2[i] == pytest.approx(lr.rvalue ** 2, abs=1e-12)
  xf, yf = stats.finite_pairs([1.0, np.nan, 3.0, 4.0, 5.0], [2.0, 1.0, np.inf, 3.0, 7.0])
  np.testing.assert_array_equal(xf, [1.0, 4.0, 5.0])
  assert math.isnan(float(stats.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])))


def test_finite_pearson_and_spearman_match_scipy_with_one_nan_rule():
  """The one Pearson of sbjax (collapse tables and convergence summaries alike)."""
  x = np.array([3.0, 1.0, np.nan, 4.0, 1.0, 5.0, 9.0, 2.0])
  y = np.array([2.0, 7.0, 1.0, 1.0, 8.0, np.inf, 2.0, 8.0])
  ok = np.isfinite(x) & np.isfinite(y)
  assert stats.finite_pearson(x, y) == pytest.approx(sps.pearsonr(x[ok], y[ok])[0], abs=1e-12)
  assert stats.spearman(x, y) == pytest.approx(sps.spearmanr(x[ok], y[ok])[0], abs=1e-12)
  for f in (stats.finite_pearson, stats.spearman):  # < 3 finite pairs, a constant side
    assert math.isnan(f([1.0, 2.0, np.nan], [3.0, 1.0, 2.0]))
    assert math.isnan(f([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 5.0]))


def test_permutation_pvalue_exact_small_n():
  """Monte-Carlo p vs the exact p enumerated over all 7! permutations."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=7)
  y = 0.5 * x + rng.normal(size=7)
  r0 = abs(sps.pearsonr(x, y)[0])
  rs = np.array([abs(np.corrcoef(x, np.asarray(y)[list(p)])[0, 1])
                 for p in itertools.permutations(range(7))])
  p_exact = np.mean(rs >= r0 - 1e-12)
  n = 10_000
  p = float(stats.permutation_pvalue(x, y, n, seed=3))
  assert abs(p - p_exact) < 4 * math.sqrt(p_exact * (1 - p_exact) / n) + 2 / n


def test_permutation_uniform_under_null_and_small_for_strong_correlation():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(400, 10))
  y = rng.normal(size=(400, 10))  # independent: the null holds
  p = stats.permutation_pvalue(x, y, n_perm=199, seed=4)
  assert p.shape == (400,)
  assert sps.kstest(p, "uniform").pvalue > 0.01
  assert 0.4 < p.mean() < 0.6
  y_strong = x[:8] + 0.1 * rng.normal(size=(8, 10))
  p_strong = stats.permutation_pvalue(x[:8], y_strong, n_perm=10_000, seed=5)
  assert np.all(p_strong <= 2e-3)


def test_tpu_preset_configs_validate():
  p = collapse.PRESETS["tpu"]
  k = p.knobs
  assert k.depths == (1, 2, 4, 8, 12) and k.widths[0] == 64 and k.widths[-1] == 1024
  cfgs = collapse.validate(p)
  assert len(cfgs) == len(k.depths) * len(k.widths) + 1
  for mc, tc in cfgs:
    assert mc.vocab_size == 50257 and mc.head.kind == "tied" and tc.seq_len <= mc.max_len
  test, quick = collapse.PRESETS["test"].knobs, collapse.PRESETS["quick"].knobs
  assert len(collapse.groups(collapse.PRESETS["test"])) <= len(collapse.groups(
      collapse.PRESETS["quick"])) and test.epoch_tokens < quick.epoch_tokens
  assert len(collapse.validate(collapse.PRESETS["test"])) == 3  # seeds, grid, second seed shape
  with pytest.raises(ValueError, match="unknown collapse preset"):
    collapse.get_preset("h100")
