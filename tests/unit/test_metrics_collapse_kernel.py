"""The collapse statistics as one pure kernel (issue 31): ``jax.jit(jax.vmap(collapse_kernel))``
over K checkpoints equals a loop over the host ``collapse_metrics``, an independent numpy
reference, and the analytic simplex-ETF case, with classes masked out (too few tokens,
absent, or dropped in one checkpoint)."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax.metrics import collapse as C
from sbjax.metrics.collapse_kernel import collapse_kernel
from tests.unit.test_metrics_collapse import KEYS, assert_close, ref_from_stats, ref_nc4, ref_stats

V, D = 12, 6
# classes 0-8 with >= 2 tokens, class 9 a single token (dropped by min_count=2), 10-11 absent
COUNTS = [30, 24, 18, 14, 11, 9, 7, 5, 3, 1, 0, 0]


def _checkpoints(n_ckpt=4):
  rng = np.random.default_rng(0)
  labels = rng.permutation(np.repeat(np.arange(V), COUNTS))
  centres = rng.normal(size=(V, D)) * 2.0
  feats, w, val = [], [], []
  for i in range(n_ckpt):  # the classes tighten with the step: the checkpoints really differ
    c = centres + 0.3 * rng.normal(size=(V, D))
    feats.append(c[labels] + (1.0 - 0.2 * i) * rng.normal(size=(labels.size, D)))
    w.append(c + 0.5 * rng.normal(size=(V, D)))
    val.append(c[labels[:60]] + rng.normal(size=(60, D)))
  f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
  mask = np.ones((n_ckpt, labels.size), bool)
  mask[-1, labels == 2] = False  # class 2 is missing in the last checkpoint
  return f32(feats), labels, f32(w), f32(val), labels[:60], mask


def test_jit_vmap_over_checkpoints_equals_host_loop_and_numpy():
  feats, labels, w, val, val_y, mask = _checkpoints()
  kern = partial(collapse_kernel, min_count=2, block_size=8, batch_size=64, per_class=True)
  out = jax.jit(jax.vmap(kern, in_axes=(0, None, 0, 0, None)))(feats, labels, w, val, val_y, mask=mask)
  assert out["nc1_cdnv"].shape == (4,) and out["nc1_cdnv"].dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(out["n_classes"]), [9, 9, 9, 8])
  for i in range(4):
    m = mask[i]
    host = C.collapse_metrics(feats[i][m], labels[m], w[i], val[i], val_y, min_count=2, block_size=8,
                              batch_size=64, per_class=True)
    for key, want in host.items():
      if key in ("class_ids", "per_class_cdnv", "per_class_interference"):
        continue
      np.testing.assert_allclose(np.asarray(out[key][i]), want, rtol=1e-5, atol=1e-6, err_msg=f"ckpt {i} {key}")
    ids = host["class_ids"]
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(out["class_analyzed"][i])), ids)
    for key in ("per_class_cdnv", "per_class_interference"):
      np.testing.assert_allclose(np.asarray(out[key][i])[ids], host[key], rtol=1e-5, atol=1e-6, err_msg=key)
  assert len(set(np.asarray(out["nc1_cdnv"]).tolist())) == 4  # four different checkpoints
  # an independent float64 numpy reference for the checkpoint with the missing class
  m = mask[-1]
  means, var, counts = ref_stats(feats[-1][m], labels[m], V)
  want = ref_from_stats(means, var, counts, w[-1], min_count=2)
  assert_close({key: np.asarray(out[key][-1]) for key in KEYS}, want, rtol=2e-4, atol=2e-5)  # float32
  idx = np.flatnonzero(counts >= 2)
  ones = np.ones(idx.size, bool)
  assert float(out["nc4_agreement"][-1]) == pytest.approx(ref_nc4(val[-1], val_y, w[-1][idx], means[idx], ones, ones, V))


def test_simplex_etf_zero_spread_and_masked_classes():
  k = 5
  etf = (np.eye(k) - 1.0 / k)  # centred simplex ETF in R^k; class 5 of V = 6 is absent
  labels = np.repeat(np.arange(k), 2)  # 2 tokens a class: the class means are exact in float32
  feats = np.stack([3.0 * etf[labels], 0.5 * etf[labels], etf[labels]]).astype(np.float32)
  w = np.concatenate([etf, np.ones((1, k))]).astype(np.float32)
  mask = np.ones((3, labels.size), bool)
  mask[1, labels == 4] = False  # one class missing: the other 4 are again a simplex ETF
  mask[2, labels > 0] = False  # one class left: undefined, NaN (no error inside the kernel)
  f = jax.jit(jax.vmap(collapse_kernel, in_axes=(0, None, None, 0, None)))
  out = jax.device_get(f(feats, labels, w, feats, labels, mask=mask, val_mask=mask))
  np.testing.assert_array_equal(out["n_classes"], [k, k - 1, 1])
  for i, kk in enumerate([k, k - 1]):
    assert out["nc1_cdnv"][i] == 0.0 and out["nc1_log10_cdnv"][i] == -math.inf
    assert out["nc1_n_zero_pairs"][i] == kk * (kk - 1) // 2
    assert out["etf_error"][i] < 1e-3  # float32: ~sqrt(eps)
    assert out["nc2_norm_cov"][i] == pytest.approx(0.0, abs=1e-6)
    assert out["nc2_cos_mean"][i] == pytest.approx(-1.0 / (kk - 1), abs=1e-6)
    assert out["nc4_agreement"][i] == 1.0
    assert out["dual_error"][i] < 1e-3  # W M~^T is proportional to I - 11^T/K in both
  # NC3: w_c = e_c - 1/5, mu~_c = e_c - 1/4 over the 4 classes left: cos = sqrt(15/16)
  assert out["nc3_cos_mean"][0] == pytest.approx(1.0, abs=1e-6)
  assert out["nc3_cos_mean"][1] == pytest.approx(math.sqrt(15 / 16), abs=1e-6)
  assert np.isnan(out["nc1_cdnv"][2]) and np.isnan(out["etf_error"][2]) and np.isnan(out["nc3_cos_mean"][2])
  # a head that is not dual to the means is seen
  w2 = w.copy()
  w2[0, 1] += 1.0
  r = jax.jit(collapse_kernel)(feats[0], labels, w2)
  assert float(r["dual_error"]) > 0.05


def test_kernel_traces_under_jit_where_the_host_function_cannot():
  feats, labels, w, _, _, _ = _checkpoints(1)
  h, w = feats[0], w[0]
  f = jax.jit(lambda h, y: collapse_kernel(h, y, w, min_count=2, block_size=8)["nc1_log10_mean_cdnv"])
  got = float(f(h, labels))  # feats and labels are tracers inside
  want = C.collapse_metrics(h, labels, w, min_count=2, block_size=8)
  assert got == pytest.approx(want["nc1_log10_mean_cdnv"], rel=1e-5)
  with pytest.raises(jax.errors.TracerArrayConversionError):  # the host wrapper validates concrete inputs
    jax.jit(lambda h: C.collapse_metrics(h, labels, w)["nc1_cdnv"])(h)
  with pytest.raises(ValueError, match="unknown collapse option.*'min_cnt'"):
    collapse_kernel(h, labels, w, min_cnt=2)
