"""sbjax.analysis.layerwise: the one PER implementation, shared by the run analysis (float32
device path) and the convergence experiment (float64 host path). (CKA to the final checkpoint:
tests/integration/test_analysis.py against ``linear_cka``.)"""

import jax
import numpy as np
import pytest

from sbjax.analysis import layerwise as lw
from sbjax.config import ModelConfig

MC = ModelConfig(vocab_size=16, d_model=12, n_layers=2, n_heads=3, rotary_pct=0.5)  # F=48, Dh=4
SHAPES = {"mlp": {"fc_out_kernel": (48, 12)},
          "attn": {"v_kernel": (12, 3, 4), "o_kernel": (3, 4, 12)}}


def _rand(rng):
  return {f"block_{i}": jax.tree.map(lambda s: rng.normal(size=s).astype(np.float32), SHAPES,
                                     is_leaf=lambda x: isinstance(x, tuple))
          for i in range(MC.n_layers)}


def _np_per(s, r):
  s = np.sort(np.asarray(s, np.float64))[::-1][:r]
  p = s / s.sum()
  p = p[p > 0]
  return float(np.exp(-(p * np.log(p)).sum()) / r)


def test_device_float32_and_host_float64_paths_agree():
  """The device path, jit(vmap) over 5 random checkpoints (weights with r_mlp = full, their
  gradients with r_mlp = 5, in one program), equals the host path per checkpoint.

  Tolerance: the float32 Gram eigenvalues of the device path are off by ~eps32 sigma_1^2
  (absolute), so each p_i = sigma_i / sum sigma moves by ~eps32 sigma_1^2 / (2 sigma_i sum
  sigma) <= ~1e-6 for these matrices (sigma_r >= sigma_1 / 70), and PER = exp(H(p)) / r
  by at most sum |dp_i| (1 + |log p_i|) <= ~1e-5 relative (measured <= 2e-6). The host
  path is exact to float64 up to the float32 PER of its spectra."""
  rng = np.random.default_rng(0)
  params, grads = [_rand(rng) for _ in range(5)], [_rand(rng) for _ in range(5)]
  stack = lambda ps: jax.tree.map(lambda *xs: np.stack(xs), *ps)
  dev = jax.jit(jax.vmap(lambda p, g: (lw.layer_pers(p, MC), lw.layer_pers(p, MC, 5, grads=g))))(
      stack(params), stack(grads))
  for j in range(5):
    hosts = (lw.layer_pers(params[j], MC, host=True),
             lw.layer_pers(params[j], MC, 5, host=True, grads=grads[j]))
    for d, host in zip(dev, hosts):
      for k in ("mlp", "ov", "ov_heads"):
        assert d[k][j].shape == host[k].shape
        np.testing.assert_allclose(np.asarray(d[k][j]), host[k], rtol=2e-5, err_msg=k)


def test_host_path_equals_numpy_svd_of_the_explicit_matrices():
  """Weights: fc_out and W_V,h W_O,h (r = head_dim); gradients: dL/d fc_out and G_h = gV_h
  W_O,h + W_V,h gO_h (r = 2 head_dim), each formed explicitly (D x D) for numpy's SVD."""
  rng = np.random.default_rng(1)
  params, grads = _rand(rng), _rand(rng)
  got, got_g = lw.layer_pers(params, MC, host=True), lw.layer_pers(params, MC, host=True,
                                                                   grads=grads)
  svd = lambda m: np.linalg.svd(np.float64(m), compute_uv=False)
  for i in range(MC.n_layers):
    b, g = params[f"block_{i}"], grads[f"block_{i}"]
    wv, wo = np.float64(b["attn"]["v_kernel"]), np.float64(b["attn"]["o_kernel"])
    gv, go = np.float64(g["attn"]["v_kernel"]), np.float64(g["attn"]["o_kernel"])
    heads = [_np_per(svd(wv[:, h] @ wo[h]), 4) for h in range(3)]
    np.testing.assert_allclose(got["ov_heads"][i], heads, rtol=1e-5)
    assert got["ov"][i] == pytest.approx(np.mean(heads), rel=1e-5)
    assert got["mlp"][i] == pytest.approx(_np_per(svd(b["mlp"]["fc_out_kernel"]), 12), rel=1e-5)
    np.testing.assert_allclose(got_g["ov_heads"][i], [
        _np_per(svd(gv[:, h] @ wo[h] + wv[:, h] @ go[h]), 8) for h in range(3)], rtol=1e-5)
    assert got_g["mlp"][i] == pytest.approx(_np_per(svd(g["mlp"]["fc_out_kernel"]), 12),
                                            rel=1e-5)


def test_scanned_layout_gives_the_same_numbers():
  """A leading layer axis under "blocks" (the scan layout) reads the same blocks."""
  params = _rand(np.random.default_rng(2))
  scanned = {"blocks": jax.tree.map(lambda *xs: np.stack(xs),
                                    *[params[f"block_{i}"] for i in range(MC.n_layers)])}
  want = lw.layer_pers(params, MC, host=True)
  for key, v in lw.layer_pers(scanned, MC, host=True).items():
    np.testing.assert_array_equal(v, want[key])
