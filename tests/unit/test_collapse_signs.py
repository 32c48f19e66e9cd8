"""NC3, UNC3 and GNC2 sign conventions on examples whose values are derived by hand."""

import math

import numpy as np
import pytest

from sbjax.metrics import CollapseOptions, collapse_metrics_from_stats

TOL = 1e-5  # float32 kernels


def metrics(means, w, **kw):
  means = np.asarray(means, np.float32)
  k = means.shape[0]
  return collapse_metrics_from_stats(means, np.full(k, 0.5, np.float32), np.full(k, 10), np.asarray(w, np.float32),
                                     options=CollapseOptions(**kw)).to_dict()


# The simplex ETF of K = 4 classes in d = 4: μ_c = e_c, so μ_G = (1/4)·1 and μ̃_c = e_c − 1/4,
# ‖μ̃_c‖² = (3/4)² + 3·(1/4)² = 3/4 and <μ̃_c, μ̃_c'> = −3/16 − 3/16 + 2/16 = −1/4 (cos −1/3).
ETF = np.eye(4)
ETF_C = ETF - 0.25
N_PERP = np.full(4, 0.5)  # unit vector orthogonal to every μ̃_c (<μ̃_c, 1> = 3/4 − 3/4 = 0)


def test_non_uniform_duality_sign_of_unc3_follows_nc3():
  # w_c = μ̃_c + s_c n with n ⟂ μ̃_c: cos_c = ‖μ̃_c‖ / sqrt(‖μ̃_c‖² + s_c²) = (√3/2)/sqrt(3/4 + s_c²);
  # s = (0, 3/2, 0, 3/2) gives cos = (1, 1/2, 1, 1/2): mean 3/4, std (ddof 1) = sqrt((4/16)/3)
  # = 1/(2√3), UNC3 = (1/(2√3))/(3/4) = 2/(3√3)
  s = np.array([0.0, 1.5, 0.0, 1.5])
  w = ETF_C + s[:, None] * N_PERP
  m = metrics(ETF, w)
  assert m["nc3_cos_mean"] == pytest.approx(0.75, abs=TOL)
  assert m["unc3_cos_cov"] == pytest.approx(2.0 / (3.0 * math.sqrt(3.0)), abs=TOL)
  assert m["nc3_cos_se"] == pytest.approx(1.0 / (2.0 * math.sqrt(3.0)) / 2.0, abs=TOL)  # std/√K
  assert m["unc3_cos_cov_guarded"] == pytest.approx(m["unc3_cos_cov"], abs=TOL)  # |mean| > 3 SE
  # the same classifier with its sign flipped: cos = (−1, −1/2, −1, −1/2), mean −3/4, and
  # UNC3 = std/mean changes sign with the mean (its size is the same)
  m = metrics(ETF, -w)
  assert m["nc3_cos_mean"] == pytest.approx(-0.75, abs=TOL)
  assert m["unc3_cos_cov"] == pytest.approx(-2.0 / (3.0 * math.sqrt(3.0)), abs=TOL)


def test_softmax_gauge_moves_nc3():
  """Adding one b to every row of W changes no prediction but changes cos(w_c, μ̃_c): NC3's mean
  and sign are not properties of the predictions alone."""
  # K = 3 means on a line in d = 2, μ_G = 0: μ̃ = (−2, 0), (−1, 0), (3, 0); W = μ̃ gives cos 1.
  mu = np.array([[-2.0, 0.0], [-1.0, 0.0], [3.0, 0.0]])
  assert metrics(mu, mu)["nc3_cos_mean"] == pytest.approx(1.0, abs=TOL)
  # b = (5, 0): w = (3, 0), (4, 0), (8, 0): cos = −1, −1, +1, mean −1/3; std (ddof 1) of
  # (−1, −1, 1) = sqrt((4/9 + 4/9 + 16/9)/2) = 2/√3, UNC3 = (2/√3)/(−1/3) = −2√3
  w = mu + np.array([5.0, 0.0])
  m = metrics(mu, w)
  assert m["nc3_cos_mean"] == pytest.approx(-1.0 / 3.0, abs=TOL)
  assert m["unc3_cos_cov"] == pytest.approx(-2.0 * math.sqrt(3.0), abs=1e-4)
  h = np.array([0.3, -0.7])
  p = lambda wm: np.exp(wm @ h - np.max(wm @ h)) / np.sum(np.exp(wm @ h - np.max(wm @ h)))  # noqa: E731
  np.testing.assert_allclose(p(w), p(mu), rtol=1e-12)  # the same predictions
  # removing the gauge (W − the mean row over the analysed classes) restores cos = 1
  assert metrics(mu, w - w.mean(0))["nc3_cos_mean"] == pytest.approx(1.0, abs=TOL)


def test_gnc2_sign_etf_and_non_uniform():
  # ETF, centred (current code): ‖u_c − u_c'‖² = 2 − 2(−1/3) = 8/3, κ = −½ log(8/3) for all
  # six pairs: mean −½ log(8/3), variance 0
  m = metrics(ETF, ETF_C)
  assert m["gnc2_log_kernel_mean"] == pytest.approx(-0.5 * math.log(8.0 / 3.0), abs=TOL)
  assert m["gnc2_log_kernel_var"] == pytest.approx(0.0, abs=TOL)
  # paper-era (uncentred): u_c = e_c, ‖e_c − e_c'‖² = 2, κ = −½ log 2 = −log √2 (orthogonal)
  m = metrics(ETF, ETF_C, gnc2_centered=False)
  assert m["gnc2_log_kernel_mean"] == pytest.approx(-0.5 * math.log(2.0), abs=TOL)
  # K = 3 in d = 2, the equilateral ETF: cos −1/2, ‖u − u'‖² = 3, κ = −½ log 3 (all pairs)
  eq = np.array([[1.0, 0.0], [-0.5, math.sqrt(3) / 2], [-0.5, -math.sqrt(3) / 2]])
  assert metrics(eq, eq)["gnc2_log_kernel_mean"] == pytest.approx(-0.5 * math.log(3.0), abs=TOL)
  # non-uniform: μ̃ = (1, 0), (0, 1), (−1, −1) (sum 0): u_3 = −(1, 1)/√2; ‖u_1 − u_2‖² = 2,
  # ‖u_1 − u_3‖² = ‖u_2 − u_3‖² = 2 + √2: κ = −½ log 2, −½ log(2 + √2) twice
  nu = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
  kap = [-0.5 * math.log(2.0)] + 2 * [-0.5 * math.log(2.0 + math.sqrt(2.0))]
  m = metrics(nu, nu)
  assert m["gnc2_log_kernel_mean"] == pytest.approx(sum(kap) / 3.0, abs=TOL)
  assert m["gnc2_log_kernel_var"] == pytest.approx(np.var(kap, ddof=1), abs=TOL)
  # the sign convention: a less uniform configuration has the larger (less negative) kernel
  assert sum(kap) / 3.0 > -0.5 * math.log(3.0)
