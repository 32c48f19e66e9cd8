"""sbjax.metrics.anisotropy against an explicit N x N numpy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax.metrics import anisotropy, anisotropy_by_layer
from tests._metrics_reference import ref_anisotropy


@pytest.mark.parametrize("shape", [(2, 3), (17, 5), (64, 32)])
def test_matches_reference_float64(shape):
  h = np.random.default_rng(shape[0]).normal(size=shape) + 0.7  # shared offset -> positive anisotropy
  with jax.enable_x64(True):
    got = float(anisotropy(jnp.asarray(h)))
  np.testing.assert_allclose(got, ref_anisotropy(h), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_matches_reference_low_precision(dtype):
  h = jnp.asarray(np.random.default_rng(0).normal(size=(50, 16)) + 0.3, dtype)
  ref = ref_anisotropy(np.asarray(h.astype(jnp.float32)))
  assert float(anisotropy(h)) == pytest.approx(ref, abs=1e-5)  # stated f32 tolerance


def test_zero_vectors_excluded_and_mask():
  f = jax.jit(anisotropy)
  h = np.random.default_rng(2).normal(size=(12, 6))
  assert float(f(np.concatenate([h, np.zeros((3, 6))]))) == pytest.approx(ref_anisotropy(h), abs=1e-6)
  assert float(f(h, np.arange(12) < 8)) == pytest.approx(ref_anisotropy(h[:8]), abs=1e-6)
  assert np.isnan(float(f(np.zeros((5, 3)))))  # < 2 usable rows: undefined
  assert np.isnan(float(f(h[:1])))


def test_by_layer_and_vmap():
  rng = np.random.default_rng(3)
  hs = rng.normal(size=(4, 20, 8)) + np.arange(4)[:, None, None] * 0.5
  want = [ref_anisotropy(x) for x in hs]
  np.testing.assert_allclose(np.asarray(jax.jit(anisotropy_by_layer)(hs.astype(np.float32))), want, atol=1e-5)
  assert np.all(np.diff(want) > 0)  # growing offset -> growing anisotropy (non-trivial check)
  m = np.arange(20) < 10
  np.testing.assert_allclose(np.asarray(anisotropy_by_layer(hs, m)), [ref_anisotropy(x[:10]) for x in hs], atol=1e-5)
