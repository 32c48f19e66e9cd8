"""Head spectra: singular values by every method, their functions against numpy, the centred gauge."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import metrics as M
from tests._metrics_reference import ref_entropy, ref_erank, ref_kl, ref_spectrum, ref_w_error


def rand_mat(rng, shape, cond=None):
  a = rng.normal(size=shape)
  if cond is not None:  # graded spectrum sigma_1/sigma_n = cond
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    a = (u * np.geomspace(1.0, 1.0 / cond, min(shape))) @ vt
  return a


_jsv = jax.jit(M.singular_values, static_argnums=1)
_jmetrics = jax.jit(M.spectrum_metrics, static_argnames=("r", "k"))

SHAPES = [(300, 40), (50, 8), (8, 33), (64, 64)]


# ---------------------------------------------------------------- singular values
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("method", ["gram", "gram_refine", "gram64", "svd"])
def test_singular_values_float64(shape, method):
  rng = np.random.default_rng(hash(shape) % 2**32)
  w = rand_mat(rng, shape, cond=1e3)
  with jax.enable_x64(True):
    s = np.asarray(_jsv(jnp.asarray(w, jnp.float64), method))
    if method == "gram64":  # "auto" under x64 is "gram64"
      np.testing.assert_array_equal(np.asarray(_jsv(jnp.asarray(w, jnp.float64), "auto")), s)
  ref = ref_spectrum(w)
  assert s.shape == (min(shape),)
  assert np.all(np.diff(s) <= 0)
  # gram in f64 loses relative accuracy ~ eps * cond^2 = 1e-10 for cond=1e3
  np.testing.assert_allclose(s, ref, rtol=1e-5, atol=0)


@pytest.mark.parametrize("shape", [(50, 8), (8, 33)])
@pytest.mark.parametrize("method", ["gram", "gram_refine", "svd"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_singular_values_float32(shape, method, dtype):
  rng = np.random.default_rng(1)
  wq = jnp.asarray(rand_mat(rng, shape, cond=10.0), dtype)
  ref = ref_spectrum(np.asarray(wq.astype(jnp.float32), np.float64))  # exact sigma of the rounded input
  s = np.asarray(_jsv(wq, method))
  assert s.dtype == np.float32
  # stated float32 tolerance: 1e-4 relative to sigma_1 (cond 10 -> all well resolved)
  np.testing.assert_allclose(s, ref, rtol=0, atol=1e-4 * ref[0])


def test_gram_refine_improves_mid_range_singular_values():
  rng = np.random.default_rng(2)
  w = rand_mat(rng, (400, 40), cond=1e3).astype(np.float32)
  ref = ref_spectrum(w.astype(np.float64))
  rel_g = np.abs(np.asarray(M.singular_values(w, "gram")) - ref) / ref
  rel_r = np.abs(np.asarray(M.singular_values(w, "gram_refine")) - ref) / ref
  assert rel_g[:5].max() < 1e-5 and rel_r[:5].max() < 1e-5
  # sigma in [~5e-3, ~3e-2] sigma_1: plain f32 gram loses digits, the refinement recovers them
  mid = slice(20, 36)
  assert rel_g[mid].max() > 1e-5
  assert np.median(rel_r[mid]) < np.median(rel_g[mid]) / 10


def test_gram64_without_x64_falls_back_to_svd():
  w = np.random.default_rng(3).normal(size=(30, 6)).astype(np.float32)
  with pytest.warns(UserWarning, match="needs jax_enable_x64"):
    s = M.singular_values(w, "gram64")
  np.testing.assert_allclose(np.asarray(s), ref_spectrum(w), rtol=1e-5)
  with pytest.raises(ValueError, match="unknown method"):
    M.singular_values(w, "qr")


def test_rank_deficient_no_nan():
  rng = np.random.default_rng(4)
  w = rng.normal(size=(60, 3)) @ rng.normal(size=(3, 12))  # rank 3
  for method in ["gram", "gram_refine", "svd"]:
    s = np.asarray(_jsv(w.astype(np.float32), method))
    assert np.all(np.isfinite(s)) and np.all(s >= 0)
    assert np.all(s[3:] <= 1e-3 * s[0])
    m = _jmetrics(jnp.asarray(s), d=2, k=5)
    for key in ("kl_to_uniform", "effective_rank", "stable_rank", "proportional_effective_rank", "w_error"):
      assert np.isfinite(float(getattr(m, key))), key
  s = M.singular_values(np.zeros((10, 4), np.float32))
  assert np.all(np.asarray(s) == 0)
  assert float(M.kl_to_uniform(s)) == pytest.approx(math.log(4))
  assert float(M.effective_rank(s)) == 0.0
  assert float(M.stable_rank(s)) == 0.0
  assert float(M.w_error(s, 1)) == 0.0
  assert float(M.condition_number(s)) == math.inf
  assert np.all(np.asarray(M.normalized_top(s, 3)) == 0)


# ---------------------------------------------------------------- functions of a spectrum
@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_metrics_vs_reference_float64(n):
  rng = np.random.default_rng(n)
  s = np.sort(rng.exponential(size=n))[::-1]
  s[-1] = 0.0 if n > 2 else s[-1]  # include an exact zero
  r = max(1, n // 2)
  ds = np.arange(0, n + 2)
  with jax.enable_x64(True):
    sj = jnp.asarray(s, jnp.float64)
    m = _jmetrics(sj, d=jnp.asarray(ds), r=None, k=3)
    per_r = float(jax.jit(M.proportional_effective_rank, static_argnums=1)(sj, r))
  np.testing.assert_allclose(float(m.kl_to_uniform), ref_kl(s), rtol=1e-5, atol=1e-12)
  np.testing.assert_allclose(float(m.singular_entropy), ref_entropy(s), rtol=1e-5, atol=1e-12)
  np.testing.assert_allclose(float(m.effective_rank), ref_erank(s), rtol=1e-5)
  np.testing.assert_allclose(float(m.proportional_effective_rank), ref_erank(s) / n, rtol=1e-5)
  np.testing.assert_allclose(per_r, ref_erank(s[:r]) / r, rtol=1e-5)
  np.testing.assert_allclose(float(m.stable_rank), (s**2).sum() / s[0] ** 2, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(m.w_error), [ref_w_error(s, min(d, n)) for d in ds], rtol=1e-5, atol=1e-12)
  assert float(m.condition_number) == (math.inf if s[-1] == 0 else pytest.approx(s[0] / s[-1], rel=1e-5))
  np.testing.assert_allclose(np.asarray(m.normalized_top)[: min(3, n)], (s / s[0])[:3], rtol=1e-6)


def test_normalized_top_padding_and_per_bad_r():
  s = jnp.asarray([4.0, 2.0, 1.0])
  top = np.asarray(M.normalized_top(s, 5))
  np.testing.assert_allclose(top[:3], [1.0, 0.5, 0.25])
  assert np.all(np.isnan(top[3:]))
  np.testing.assert_allclose(np.asarray(M.normalized_top(s, 2)), [1.0, 0.5])
  with pytest.raises(ValueError, match="must be in"):
    M.proportional_effective_rank(s, 4)


# ---------------------------------------------------------------- the centred spectrum
def test_centred_spectrum_invariant_to_the_gauge_the_raw_one_not():
  """W and W + 1 a^T (the same softmax) have the same centred metrics, not the same raw ones;
  each against numpy's SVD of W and of (I - 11^T/V) W. A pure gauge head 1 a^T centres to
  the zero matrix (KL = log n, erank 0) while its raw spectrum is rank 1."""
  v, d, n, dims = 48, 12, 3, np.array([1, 2, 4, 8])
  rng = np.random.default_rng(0)
  w = rng.normal(size=(n, v, d)) * np.linspace(2, 0.2, d)  # anisotropic columns
  gauge = np.ones((1, v, d)) * np.arange(1.0, d + 1)
  allw = np.concatenate([w, w + rng.normal(size=(n, 1, d)) * 3.0, gauge]).astype(np.float32)
  r = jax.device_get(jax.jit(jax.vmap(lambda x: M.head_spectra(x, jnp.asarray(dims), "svd")))(allw))
  proj = np.eye(v) - np.ones((v, v)) / v

  def flat(m, i):
    return np.array([m.kl_to_uniform[i], m.effective_rank[i], *m.w_error[i]])

  def np_metrics(x):
    s = ref_spectrum(x)
    return np.array([ref_kl(s), ref_erank(s), *(ref_w_error(s, dd) for dd in dims)])

  for i in range(n):
    c, ca = flat(r.centred, i), flat(r.centred, n + i)
    np.testing.assert_allclose(c, ca, rtol=2e-4, atol=2e-5)  # the gauge is gone
    assert np.abs(flat(r.raw, i) - flat(r.raw, n + i)).max() > 0.05  # the raw spectrum sees 1 a^T
    np.testing.assert_allclose(flat(r.raw, n + i), np_metrics(allw[n + i]), rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(c, np_metrics(proj @ allw[i].astype(np.float64)), rtol=2e-4, atol=2e-5)
  assert r.centred.effective_rank[-1] == 0.0
  assert r.centred.kl_to_uniform[-1] == pytest.approx(np.log(d), rel=1e-6)
  assert r.raw.effective_rank[-1] == pytest.approx(1.0, rel=1e-5)
  np.testing.assert_allclose(np.asarray(M.center_vocab(allw[0])), proj @ allw[0], atol=1e-5)


# ---------------------------------------------------------------- gradients
def test_gradients_flow_through_the_default_eigenvalue_kernel():
  """d sum(sigma) / dW = U V^T (the nuclear norm's gradient, numpy's SVD), through the float32
  Gram + eigenvalue primitive of method="auto", under jit and vmap too."""
  w = np.random.default_rng(7).normal(size=(3, 60, 12)).astype(np.float32)
  grad = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(M.singular_values(x)))))(w)
  for i in range(3):
    u, _, vt = np.linalg.svd(w[i].astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(np.asarray(grad[i]), u @ vt, atol=2e-4)
  # through a metric: d KL / dW by central differences (float64)
  with jax.enable_x64(True):
    x = jnp.asarray(w[0], jnp.float64)
    kl = jax.jit(lambda x: M.kl_to_uniform(M.singular_values(x, "gram")))
    g = jax.grad(lambda x: M.kl_to_uniform(M.singular_values(x, "gram")))(x)
    e = np.zeros(x.shape)
    e[5, 3] = 1e-6
    fd = (float(kl(x + e)) - float(kl(x - e))) / 2e-6
    assert float(g[5, 3]) == pytest.approx(fd, rel=1e-5)
