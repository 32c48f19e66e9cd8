"""Centred head spectra (sbjax.metrics.spectrum.center_vocab / head_spectra): invariant to the
softmax gauge W -> W + 1 a^T, the raw spectrum is not; values against numpy SVDs. One jitted
vmap over all heads, with method="svd" (the default Gram/tridiagonal kernel compiles in ~5 s;
tests/integration/test_analysis.py checks the analysis's centred columns, which use it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax.metrics import spectrum as S

DIMS = np.array([1, 2, 4, 8])
V, D, N = 48, 12, 3


def np_metrics(w, dims):
  s = np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)
  p = s / s.sum()
  h = -(p[p > 0] * np.log(p[p > 0])).sum()
  tail = np.array([np.sqrt((s[d:] ** 2).sum() / (s ** 2).sum()) for d in dims])
  return np.array([np.log(len(s)) - h, np.exp(h), *tail])


def flat(m, i):
  return np.array([m["kl_to_uniform"][i], m["effective_rank"][i], *np.asarray(m["w_error"][i])])


@pytest.fixture(scope="module")
def spectra():
  """N heads W (V=48, d=12), the same heads plus a large gauge term 1 a^T, and one pure
  gauge head 1 a^T; their raw and centred metrics from one jitted vmap."""
  rng = np.random.default_rng(0)
  w = rng.normal(size=(N, V, D)) * np.linspace(2, 0.2, D)  # anisotropic columns
  a = rng.normal(size=(N, 1, D)) * 3.0
  gauge = np.ones((1, V, D)) * np.arange(1.0, D + 1)
  allw = np.concatenate([w, w + a, gauge]).astype(np.float32)
  out = jax.jit(jax.vmap(lambda x: S.head_spectra(x, jnp.asarray(DIMS), "svd")))(allw)
  return allw, jax.device_get(out)


def test_centred_invariant_to_gauge_raw_not(spectra):
  allw, r = spectra
  proj = np.eye(V) - np.ones((V, V)) / V
  for i in range(N):
    c, ca = flat(r["centred"], i), flat(r["centred"], N + i)
    np.testing.assert_allclose(c, ca, rtol=2e-4, atol=2e-5)  # the gauge is gone
    raw, raw_a = flat(r["raw"], i), flat(r["raw"], N + i)
    assert np.abs(raw - raw_a).max() > 0.05  # the raw spectrum sees 1 a^T
    # numpy references: raw = SVD(W), centred = SVD((I - 11^T/V) W)
    np.testing.assert_allclose(raw, np_metrics(allw[i], DIMS), rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(raw_a, np_metrics(allw[N + i], DIMS), rtol=2e-4, atol=2e-5)
    for j in (i, N + i):
      np.testing.assert_allclose(c, np_metrics(proj @ allw[j].astype(np.float64), DIMS),
                                 rtol=2e-4, atol=2e-5)


def test_pure_gauge_head_centres_to_zero(spectra):
  allw, r = spectra
  # 1 a^T centres to the zero matrix: KL = log n, erank 0 (the degenerate convention),
  # while the raw head is rank 1: KL = log n, erank 1
  assert r["centred"]["effective_rank"][-1] == 0.0
  assert r["centred"]["kl_to_uniform"][-1] == pytest.approx(np.log(D), rel=1e-6)
  assert r["raw"]["effective_rank"][-1] == pytest.approx(1.0, rel=1e-5)
  proj = np.eye(V) - np.ones((V, V)) / V
  np.testing.assert_allclose(np.asarray(S.center_vocab(allw[0])), proj @ allw[0], atol=1e-5)
  with pytest.raises(ValueError, match="2-D"):
    S.center_vocab(jnp.ones((2, 3, 4)))
