"""The collapse variants of sbjax.metrics (bias-corrected norms, guarded UNC3) against numpy
references and sampled populations of known norms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import metrics as C
from sbjax.metrics import corrected_sq_norms, unc3_guarded, unc3_reason
from sbjax.metrics._collapse_variants import norm_cov

K = 64
KM = 32  # collapse_metrics_from_stats calls all see KM analysed rows of d=8: one compile of the core
_cn = jax.jit(corrected_sq_norms, static_argnames=("weighted_mean",))
_u3 = jax.jit(unc3_guarded, static_argnames=("ddof", "n_se"))


# ----------------------------------------------------------------- numpy references
def ref_corrected(means, var_biased, counts, weighted=False):
  """Direct numpy form of the module doc: classes with N_c >= 2, unbiased sigma^2 (N_c - 1),
  b_c = (1 - 2 a_c) s_c + sum a^2 s, clipped at 0."""
  ok = counts >= 2
  mu, n = means[ok].astype(np.float64), counts[ok].astype(np.float64)
  s = var_biased[ok] * n / (n - 1) / n
  a = n / n.sum() if weighted else np.full(n.size, 1.0 / n.size)
  mt = mu - (a[:, None] * mu).sum(0)
  raw = (mt ** 2).sum(1)
  corr = np.maximum(raw - ((1 - 2 * a) * s + (a * a * s).sum()), 0.0)
  return ok, raw, corr


def _cov(x):
  return x.std(ddof=1) / x.mean()


def test_corrected_norms_match_numpy_with_singletons_and_weights():
  rng = np.random.default_rng(0)
  v, d = KM + 8, 8
  means = rng.normal(size=(v, d)) * 2
  var = rng.uniform(0.5, 3.0, v)
  counts = rng.integers(3, 30, v)
  counts[:5] = 1  # singletons: left out of the corrected statistics
  counts[5:8] = 2
  for weighted in (False, True):
    ok, raw, corr = ref_corrected(means, var, counts, weighted)
    got = _cn(jnp.asarray(means, jnp.float32), jnp.asarray(var, jnp.float32),
                             jnp.asarray(counts), weighted_mean=weighted)
    np.testing.assert_array_equal(np.asarray(got.valid), ok)
    np.testing.assert_allclose(np.asarray(got.sq_norms)[ok], corr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got.raw_sq_norms)[ok], raw, rtol=1e-4)
    assert int(got.n_valid) == ok.sum() and int(got.n_clipped) == 0
  # collapse_metrics_from_stats: the same numbers over the analysed classes (min_count 3 drops more)
  w = rng.normal(size=(v, d))
  r = C.collapse_metrics_from_stats(means, var, counts, w, options=C.CollapseOptions(min_count=3)).to_dict()
  keep = counts >= 3
  ok, _, corr = ref_corrected(means[keep], var[keep], counts[keep])
  assert r["nc2_corrected_n_classes"] == ok.sum()
  assert r["nc2_norm_cov_corrected"] == pytest.approx(_cov(np.sqrt(corr)), rel=1e-4)


def _population(rng, d, norms):
  """K centred means of the given norms: K/2 random directions and their negatives."""
  u = rng.standard_normal((K // 2, d))
  u /= np.linalg.norm(u, axis=1, keepdims=True)
  return np.concatenate([u, -u]) * np.concatenate([norms, norms])[:, None]


def _draws(rng, mu, sig2_trace, counts, n_draws):
  """Exact sampling distribution of (class mean, biased sigma^2) for Gaussian tokens with
  isotropic covariance (trace sig2_trace): mu^ ~ N(mu, sig2/(N d) I),
  sigma^2_biased ~ (sig2 / d) chi^2_{(N-1) d} / N."""
  d = mu.shape[1]
  e = rng.standard_normal((n_draws,) + mu.shape) * np.sqrt(sig2_trace / (counts * d))[None, :, None]
  vb = sig2_trace / d * rng.chisquare((counts - 1) * d, size=(n_draws, mu.shape[0])) / counts
  return jnp.asarray(mu[None] + e, jnp.float32), jnp.asarray(vb, jnp.float32)


@jax.jit
def _vmapped(m, v, c):
  def one(mm, vv):
    cn = corrected_sq_norms(mm, vv, c)
    return cn.sq_norms, cn.raw_sq_norms, norm_cov(cn.sq_norms, cn.valid), norm_cov(cn.raw_sq_norms, cn.valid)
  return jax.vmap(one)(m, v)


@pytest.mark.parametrize("n_c", [2, 10, 1000])
def test_corrected_norms_unbiased_raw_not(n_c):
  """Known mu_c (norms 1..2, true CoV 0.200) and sigma_c (trace 2.25) in d=256, N_c tokens per
  class, 400 draws: each corrected squared norm is unbiased (|z| < 4.5 over the 64 classes) and
  the corrected CoV reads the true one within 0.012 (a ratio of noisy terms: the small excess
  at N_c=2, +0.008, is estimation noise, not count bias); the raw norms are biased by
  sigma_c^2/N_c and their CoV is off by more than 0.015 at N_c = 2 and 10."""
  rng = np.random.default_rng(1)
  mu = _population(rng, 256, np.linspace(1, 2, K // 2))
  true_sq = (mu ** 2).sum(1)
  true_cov = _cov(np.sqrt(true_sq))
  counts = np.full(K, n_c)
  sq, raw, cc, rc = (np.asarray(a, np.float64) for a in _vmapped(*_draws(rng, mu, 2.25, counts, 400), jnp.asarray(counts)))
  z = (sq.mean(0) - true_sq) / (sq.std(0, ddof=1) / math.sqrt(sq.shape[0]))
  assert np.abs(z).max() < 4.5
  z_raw = (raw.mean(0) - true_sq) / (raw.std(0, ddof=1) / math.sqrt(raw.shape[0]))
  assert abs(cc.mean() - true_cov) < 0.012
  if n_c < 1000:
    assert np.abs(z_raw).min() > 5.0  # every raw norm is biased upward
    assert abs(rc.mean() - true_cov) > 0.015
  else:
    assert abs(rc.mean() - true_cov) < 0.002


def test_unc3_guard():
  rng = np.random.default_rng(3)
  valid = np.ones(K, bool)
  # well conditioned: cos ~ 0.5 +- 0.1 -> the raw CoV
  cos = 0.5 + 0.1 * rng.standard_normal(K)
  u = _u3(jnp.asarray(cos), valid)
  assert not bool(u.ill_conditioned)
  assert float(u.value) == pytest.approx(cos.std(ddof=1) / cos.mean(), rel=1e-5)
  assert float(u.cos_se) == pytest.approx(cos.std(ddof=1) / math.sqrt(K), rel=1e-5)
  assert unc3_reason(u.cos_mean, u.cos_se) == ""
  # std 1 (SE 1/8) and a mean of 3.1 SE passes, of 2.9 SE does not (NaN, a reason, the raw
  # value still finite); padded rows are ignored
  base = rng.standard_normal(K)
  base = (base - base.mean()) / base.std(ddof=1)
  for f, bad in ((3.1, False), (2.9, True)):
    u = _u3(jnp.asarray(np.r_[base + f / math.sqrt(K), 100.0, -100.0]), np.r_[valid, False, False])
    assert bool(u.ill_conditioned) is bad and math.isnan(float(u.value)) is bad
    assert float(u.raw) == pytest.approx(math.sqrt(K) / f, rel=1e-4)
    assert ("3 standard errors" in unc3_reason(u.cos_mean, u.cos_se)) is bad
  # through collapse_metrics_from_stats: w_c = +-mu~_c gives cos = +-1, mean 0 -> guarded NaN
  means = rng.normal(size=(KM, 8))
  mt = means - means.mean(0)
  w = mt * np.where(np.arange(KM) % 2 == 0, 1.0, -1.0)[:, None]
  r = C.collapse_metrics_from_stats(means, np.ones(KM), np.full(KM, 5), w).to_dict()
  assert r["unc3_ill_conditioned"] == 1 and math.isnan(r["unc3_cos_cov_guarded"])
  assert abs(r["nc3_cos_mean"]) < 1e-5 and r["nc3_cos_se"] == pytest.approx(1 / math.sqrt(KM - 1), rel=1e-3)
