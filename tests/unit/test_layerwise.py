"""sbjax.analysis.layerwise: the PER of the float32 device path and of the float64 host path agree."""

import jax
import numpy as np
import pytest

from sbjax.analysis import layerwise as lw
from sbjax.config import ModelConfig
from tests._metrics_reference import ref_erank

MC = ModelConfig(vocab_size=16, d_model=12, n_layers=2, n_heads=3, rotary_pct=0.5)  # F=48, Dh=4
SHAPES = {"mlp": {"fc_out_kernel": (48, 12)},
          "attn": {"v_kernel": (12, 3, 4), "o_kernel": (3, 4, 12)}}


def _rand(rng):
  return {f"block_{i}": jax.tree.map(lambda s: rng.normal(size=s).astype(np.float32), SHAPES,
                                     is_leaf=lambda x: isinstance(x, tuple))
          for i in range(MC.n_layers)}


def test_device_float32_and_host_float64_paths_agree():
  """The device path, jit(vmap) over 5 random checkpoints (weights with r_mlp = full, their
  gradients with r_mlp = 5, in one program), equals the host path per checkpoint."""
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
    heads = [ref_erank(svd(wv[:, h] @ wo[h])[:4]) / 4 for h in range(3)]
    np.testing.assert_allclose(got["ov_heads"][i], heads, rtol=1e-5)
    assert got["ov"][i] == pytest.approx(np.mean(heads), rel=1e-5)
    assert got["mlp"][i] == pytest.approx(ref_erank(svd(b["mlp"]["fc_out_kernel"])[:12]) / 12, rel=1e-5)
    np.testing.assert_allclose(got_g["ov_heads"][i], [
        ref_erank(svd(gv[:, h] @ wo[h] + wv[:, h] @ go[h])[:8]) / 8 for h in range(3)], rtol=1e-5)
    assert got_g["mlp"][i] == pytest.approx(ref_erank(svd(g["mlp"]["fc_out_kernel"])[:12]) / 12,
                                            rel=1e-5)


def test_scanned_layout_gives_the_same_numbers():
  """A leading layer axis under "blocks" (the scan layout) reads the same blocks."""
  params = _rand(np.random.default_rng(2))
  scanned = {"blocks": jax.tree.map(lambda *xs: np.stack(xs),
                                    *[params[f"block_{i}"] for i in range(MC.n_layers)])}
  want = lw.layer_pers(params, MC, host=True)
  for key, v in lw.layer_pers(scanned, MC, host=True).items():
    np.testing.assert_array_equal(v, want[key])
