"""Linear and debiased CKA (sbjax.metrics) against explicit HSIC references (Gram matrices)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax.metrics import cka_to_reference, cka_to_reference_by_layer, linear_cka
from tests._metrics_reference import ref_cka_biased, ref_cka_debiased

SHAPES = [(8, 3, 5), (20, 30, 4), (40, 6, 50), (16, 16, 16)]


@pytest.mark.parametrize("n,d1,d2", SHAPES)
@pytest.mark.parametrize("debiased", [False, True])
def test_matches_reference_float64(n, d1, d2, debiased):
  rng = np.random.default_rng(n * d1 + d2)
  x = rng.normal(size=(n, d1)) + 1.5
  y = x[:, :1] * rng.normal(size=(1, d2)) + 0.5 * rng.normal(size=(n, d2))
  ref = (ref_cka_debiased if debiased else ref_cka_biased)(x, y)
  with jax.enable_x64(True):
    got = float(linear_cka(jnp.asarray(x), jnp.asarray(y), debiased=debiased))
  np.testing.assert_allclose(got, ref, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_matches_reference_low_precision(dtype):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(32, 12)), dtype)
  y = jnp.asarray(rng.normal(size=(32, 40)), dtype)
  xf, yf = np.asarray(x.astype(jnp.float32)), np.asarray(y.astype(jnp.float32))
  assert float(linear_cka(x, y)) == pytest.approx(ref_cka_biased(xf, yf), abs=1e-5)
  assert float(linear_cka(x, y, debiased=True)) == pytest.approx(ref_cka_debiased(xf, yf), abs=1e-4)


def test_to_reference_and_by_layer_match_pairwise_calls():
  rng = np.random.default_rng(2)
  acts = rng.normal(size=(5, 3, 10, 7)).astype(np.float32)
  acts[:, :, :, 0] += np.arange(5)[:, None, None]  # vary per checkpoint
  ref = acts[-1] + 0.1 * rng.normal(size=(3, 10, 7)).astype(np.float32)
  for deb in (False, True):
    grid = np.asarray(jax.jit(cka_to_reference_by_layer, static_argnums=2)(acts, ref, deb))
    assert grid.shape == (5, 3)
    for k in range(5):
      for l in range(3):
        want = (ref_cka_debiased if deb else ref_cka_biased)(acts[k, l], ref[l])
        assert grid[k, l] == pytest.approx(want, abs=2e-5)
    np.testing.assert_allclose(np.asarray(cka_to_reference(acts[:, 1], ref[1], deb)), grid[:, 1], atol=1e-6)
  # feature-space path (n > d) also covered
  a2, r2 = rng.normal(size=(4, 30, 3)), rng.normal(size=(30, 2))
  np.testing.assert_allclose(np.asarray(cka_to_reference(a2, r2)), [ref_cka_biased(a, r2) for a in a2], atol=1e-5)
