"""Neural collapse metrics against numpy K x K references and analytic cases."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbjax import metrics as C
from tests._metrics_reference import ref_from_stats, ref_nc4, ref_stats


def make_data(seed, v=30, d=8, n=600, n_used=None, spread=1.0, sep=3.0, zipf=True):
  rng = np.random.default_rng(seed)
  n_used = n_used or v
  probs = 1.0 / np.arange(1, n_used + 1) if zipf else np.ones(n_used)
  labels = rng.choice(n_used, size=n, p=probs / probs.sum())
  centres = rng.normal(size=(v, d)) * sep
  feats = centres[labels] + spread * rng.normal(size=(n, d))
  w = centres + 0.5 * rng.normal(size=(v, d))
  return feats, labels, w


KEYS = ["nc1_cdnv", "nc1_log10_mean_cdnv", "nc1_log10_cdnv", "nc2_norm_cov", "nc2_log_norm_cov", "nc2_cos_mean", "nc2_cos_std",
        "etf_error", "gnc2_log_kernel_mean", "gnc2_log_kernel_var", "gnc2_riesz_mean", "nc3_cos_mean", "unc3_cos_cov",
        "dual_error"]


def host(feats, labels, w, *val, **options):
  """collapse_metrics with ``options`` as a dict (a CSV row)."""
  return C.collapse_metrics(feats, labels, w, *val, options=C.CollapseOptions(**options)).to_dict()


def from_stats(means, var, counts, w, **options):
  return C.collapse_metrics_from_stats(means, var, counts, w, options=C.CollapseOptions(**options)).to_dict()


def per_class(r, key):
  return r[key][r["class_analyzed"]]


def assert_close(got, want, rtol, atol=0.0, keys=KEYS):
  for key in keys:
    np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)


# ---------------------------------------------------------------- vs reference
VARIANTS = [
    {},  # all defaults (paper-era variants)
    {"min_count": 3, "cdnv_exponent": 1, "weighted_mean": True, "norm_variant": "squared",
     "angle_variant": "inner", "gnc2_centered": False, "ddof": 0},  # every alternative at once
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_collapse_metrics_match_reference_float64(variant):
  feats, labels, w = make_data(0, v=40, d=6, n=500, n_used=33)
  vla = make_data(1, v=40, d=6, n=120, n_used=33)[1]
  vfe = feats[:120] + 0.8 * np.random.default_rng(2).normal(size=(120, 6))
  v = w.shape[0]
  kw = dict(variant)
  ref_kw = {"min_count": kw.get("min_count", 1), "k": kw.get("cdnv_exponent", 2),
            "weighted_mean": kw.get("weighted_mean", False), "norm_variant": kw.get("norm_variant", "norm"),
            "angle_variant": kw.get("angle_variant", "cos"), "gnc2_centered": kw.get("gnc2_centered", True),
            "ddof": kw.get("ddof", 1)}
  with jax.enable_x64(True):
    got = host(feats, labels, w, vfe, vla, block_size=8, batch_size=128, per_class=True, **kw)
  means, var, counts = ref_stats(feats, labels, v)
  want = ref_from_stats(means, var, counts, w, **ref_kw)
  assert got["n_classes"] == want["n_classes"]
  assert_close(got, want, rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(per_class(got, "per_class_cdnv"), want["per_class_cdnv"], rtol=1e-5)
  np.testing.assert_allclose(per_class(got, "per_class_interference"), want["per_class_interference"], rtol=1e-5,
                             atol=1e-9)
  idx = np.flatnonzero(counts >= ref_kw["min_count"])
  ones = np.ones(len(idx), bool)
  want_nc4 = ref_nc4(vfe, vla, w[idx], means[idx], ones, ones, v)
  assert got["nc4_agreement"] == pytest.approx(want_nc4, abs=1e-12)
  assert 0.0 < want_nc4 < 1.0  # non-trivial
  assert got["nc1_n_pairs"] == len(idx) * (len(idx) - 1) // 2
  assert got["nc1_n_coincident_pairs"] == 0
  assert got["nc1_mean_log10_cdnv"] == got["nc1_log10_cdnv"]  # the old name of the mean of logs


def test_collapse_metrics_float32_bf16_tolerance():
  feats, labels, w = make_data(3, v=50, d=16, n=800, n_used=41)
  means, var, counts = ref_stats(feats.astype(np.float32), labels, 50)
  want = ref_from_stats(means, var, counts, w.astype(np.float32))
  got = host(feats.astype(np.float32), labels, w.astype(np.float32), block_size=16)
  assert_close(got, want, rtol=2e-4, atol=2e-5)  # stated float32 tolerance
  fb = jnp.asarray(feats, jnp.bfloat16)
  means_b, var_b, counts_b = ref_stats(np.asarray(fb.astype(jnp.float32)), labels, 50)
  want_b = ref_from_stats(means_b, var_b, counts_b, w)
  got_b = host(fb, labels, jnp.asarray(w, jnp.float32), block_size=16)
  assert_close(got_b, want_b, rtol=2e-4, atol=2e-5)


def test_nc4_search_all_and_unweighted():
  feats, labels, w = make_data(4, v=40, d=6, n=500, n_used=30)
  vfe = feats[:120] + 1.5 * np.random.default_rng(0).normal(size=(120, 6))
  vla = labels[:120]
  means, var, counts = ref_stats(feats, labels, 40)
  with jax.enable_x64(True):
    got = host(feats, labels, w, vfe, vla, nc4_search="all", nc4_weighted=False, nc4_chunk_size=7,
                             block_size=8, batch_size=128)
    got_an = host(feats, labels, w, vfe, vla, nc4_chunk_size=4, block_size=8, batch_size=128)
  want = ref_nc4(vfe, vla, w, means, np.ones(40, bool), counts > 0, 40, weighted=False)
  assert got["nc4_agreement"] == pytest.approx(want, abs=1e-12)
  idx = np.flatnonzero(counts > 0)
  want_an = ref_nc4(vfe, vla, w[idx], means[idx], np.ones(len(idx), bool), np.ones(len(idx), bool), 40)
  assert got_an["nc4_agreement"] == pytest.approx(want_an, abs=1e-12)
  assert got["nc4_agreement"] != got_an["nc4_agreement"]  # the variants differ on this data
  # token and class chunks that do not divide B = 120 / S = 40 give identical hits
  with jax.enable_x64(True):
    wr, mr, wv, mv = C.nc4_search_set(means, counts, w, search="all")
    st_small = C.nc4_update(C.nc4_init(40), vfe, vla, wr, mr, w_valid=wv, mean_valid=mv, chunk_size=7, token_chunk=13)
    rate = float(C.nc4_agreement(st_small, weighted=False))
  assert rate == pytest.approx(want, abs=1e-12)
  assert int(np.asarray(st_small.counts).sum()) == 120


# ---------------------------------------------------------------- robustness
def test_input_errors():
  feats, labels, w = make_data(6, v=10, d=4, n=50)
  # non-finite features, labels beyond V, one class: the bad-input table of analyze
  with pytest.raises(ValueError, match="validation labels must lie"):
    host(feats, labels, w, feats[:5], np.full(5, 99))
  with pytest.raises(ValueError, match="one_pass_variances needs float64"):
    host(feats, labels, w, variance="one_pass")
  with pytest.raises(ValueError, match="identical"):
    host(np.ones((6, 4)), np.array([0, 0, 1, 1, 2, 2]), w)


def test_identical_means_single_token_classes_rank_deficient():
  rng = np.random.default_rng(7)
  d = 6
  basis = rng.normal(size=(2, d))  # features live in a 2-D subspace: rank deficient
  centres = rng.normal(size=(8, 2)) @ basis
  centres[5] = centres[2]  # two identical class means
  labels = np.concatenate([np.repeat(np.arange(7), 4), [7]])  # class 7 has a single token
  feats = centres[labels] + (rng.normal(size=(len(labels), 2)) @ basis) * 0.1
  feats[labels == 5] = feats[labels == 2]  # exactly identical means
  w = rng.normal(size=(8, d))
  r = host(feats.astype(np.float32), labels, w.astype(np.float32))
  for key in KEYS:
    assert np.isfinite(r[key]), key
  assert r["nc1_n_coincident_pairs"] == 1
  assert r["gnc2_n_coincident_pairs"] == 1
  means, var, counts = ref_stats(feats, labels, 8)
  assert var[7] == 0.0
  s = [((var[i] + var[j]) / 2) / np.sum((means[i] - means[j]) ** 2) ** 2  # without the coincident pair
       for i in range(8) for j in range(8) if i < j and (i, j) != (2, 5)]
  assert r["nc1_cdnv"] == pytest.approx(np.mean(s), rel=1e-3)


def test_float32_overflow_in_cdnv_is_handled():
  rng = np.random.default_rng(8)
  k, d = 12, 3
  means = rng.normal(size=(k, d))
  means[1] = means[0] + 1e-2  # close pair
  means[3] = means[2] + 1e-2
  var = np.full(k, 1e34)  # s = 1e34 / (3e-4)^2 ~ 1e41: overflows float32 as a plain sum
  counts = np.full(k, 5)
  w = rng.normal(size=(k, d))
  want = ref_from_stats(means, var, counts, w)
  r = from_stats(means.astype(np.float32), var.astype(np.float32), counts, w.astype(np.float32), block_size=4)
  assert want["nc1_cdnv"] > np.finfo(np.float32).max  # the true mean itself overflows f32
  assert r["nc1_cdnv"] == math.inf  # -> reported as inf, never NaN
  assert r["nc1_log10_cdnv"] == pytest.approx(want["nc1_log10_cdnv"], rel=1e-4)
  var2 = np.full(k, 1e28)  # true mean ~1e35 fits in f32 but the squares / naive sums would not
  want2 = ref_from_stats(means, var2, counts, w)
  r2 = from_stats(means.astype(np.float32), var2.astype(np.float32), counts, w.astype(np.float32), block_size=4)
  # rel 3e-3: the pair at distance 1e-2 loses ~1e-3 of d⁴ to float32 rounding of the Gram
  # distances ‖a‖² + ‖b‖² − 2a·b (eps·‖a‖²/d² ≈ 6e-4 on d², doubled in d⁴); the exact digits
  # depend on XLA's code generation (1.1e-3 at -O0)
  assert r2["nc1_cdnv"] == pytest.approx(want2["nc1_cdnv"], rel=3e-3)


def test_float32_riesz_kernel_on_nearly_coincident_directions():
  """Riesz s-energy with s=40 on two directions ~1e-2 apart (resolvable in float32):
  that term ~1e80 overflows float32 (and any plain f32 sum); the log-space mean stays
  accurate and finite."""
  rng = np.random.default_rng(11)
  k, d = 10, 4
  means = rng.normal(size=(k, d)) * 3
  means[1] = means[0] + 5e-2 * rng.normal(size=d)  # nearly the same direction
  var, counts, w = np.ones(k), np.full(k, 4), rng.normal(size=(k, d))
  want = ref_from_stats(means, var, counts, w, riesz_s=40.0)
  assert want["gnc2_riesz_mean"] > 1e60  # far beyond float32's 3.4e38
  r = from_stats(means.astype(np.float32), var.astype(np.float32), counts, w.astype(np.float32),
                           block_size=4, riesz_s=40.0)
  assert np.isfinite(r["gnc2_riesz_log_mean"])
  assert r["gnc2_riesz_log_mean"] == pytest.approx(np.log(want["gnc2_riesz_mean"]), rel=2e-2)
  assert r["gnc2_log_kernel_mean"] == pytest.approx(want["gnc2_log_kernel_mean"], rel=1e-3)


# ---------------------------------------------------------------- accumulators
def test_one_pass_matches_two_pass_float64():
  feats, labels, _ = make_data(9, v=15, d=5, n=300)
  feats = feats + 50.0  # large offset stresses the one-pass cancellation
  with jax.enable_x64(True):
    st = C.mean_update(C.mean_init(15, 5), feats, labels)
    means, _ = C.class_means(st)
    vs = C.class_variances(C.var_update(C.var_init(15), feats, labels, means))
    op = C.one_pass_variances(st)
    assert st.sums.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(op), np.asarray(vs), rtol=1e-8, atol=1e-10)
  _, var_ref, _ = ref_stats(feats, labels, 15)
  np.testing.assert_allclose(np.asarray(vs), var_ref, rtol=1e-10)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), cuts=st.lists(st.integers(0, 120), min_size=0, max_size=4))
def test_streaming_any_batching_equals_one_shot(seed, cuts):
  """Each batch accumulated into its own state (one per host), then merged: the one-shot state."""
  feats, labels, w = make_data(seed % 1000, v=12, d=4, n=120)
  bounds = [0] + sorted(cuts) + [120]
  with jax.enable_x64(True):
    means = C.class_means(C.mean_update(C.mean_init(12, 4), feats, labels))[0]
    np.testing.assert_allclose(np.asarray(means), ref_stats(feats, labels, 12)[0], rtol=1e-12, atol=1e-12)
    passes = [(C.mean_init(12, 4), jax.jit(lambda s, m: C.mean_update(s, feats, labels, m))),
              (C.var_init(12), jax.jit(lambda s, m: C.var_update(s, feats, labels, means, m))),
              (C.nc4_init(12), jax.jit(lambda s, m: C.nc4_update(s, feats, labels, w, means, valid=m)))]
    for init, update in passes:
      parts = [update(init, (np.arange(120) >= a) & (np.arange(120) < b)) for a, b in zip(bounds[:-1], bounds[1:])]
      for got, want in zip(functools.reduce(C.merge, parts), update(init, np.ones(120, bool))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the pure function
def test_neural_collapse_simplex_etf_zero_spread_and_masked_classes():
  """jit(vmap(neural_collapse)) with token masks: a class dropped in one checkpoint, and a
  checkpoint with one class left (undefined: NaN, no error inside the traced function)."""
  k = 5
  etf = (np.eye(k) - 1.0 / k)  # centred simplex ETF in R^k; class 5 of V = 6 is absent
  labels = np.repeat(np.arange(k), 2)  # 2 tokens a class: the class means are exact in float32
  feats = np.stack([3.0 * etf[labels], 0.5 * etf[labels], etf[labels]]).astype(np.float32)
  w = np.concatenate([etf, np.ones((1, k))]).astype(np.float32)
  mask = np.ones((3, labels.size), bool)
  mask[1, labels == 4] = False  # one class missing: the other 4 are again a simplex ETF
  mask[2, labels > 0] = False  # one class left
  f = jax.jit(jax.vmap(C.neural_collapse, in_axes=(0, None, None, 0, None)))
  out = jax.device_get(f(feats, labels, w, feats, labels, mask=mask, val_mask=mask))
  np.testing.assert_array_equal(out.n_classes, [k, k - 1, 1])
  for i, kk in enumerate([k, k - 1]):
    assert out.nc1_cdnv[i] == 0.0 and out.nc1_log10_cdnv[i] == -math.inf
    assert out.nc1_n_zero_pairs[i] == kk * (kk - 1) // 2
    assert out.etf_error[i] < 1e-3  # float32: ~sqrt(eps)
    assert out.nc2_norm_cov[i] == pytest.approx(0.0, abs=1e-6)
    assert out.nc2_cos_mean[i] == pytest.approx(-1.0 / (kk - 1), abs=1e-6)
    assert out.nc4_agreement[i] == 1.0
    assert out.dual_error[i] < 1e-3  # W M~^T is proportional to I - 11^T/K in both
  # NC3: w_c = e_c - 1/5, mu~_c = e_c - 1/4 over the 4 classes left: cos = sqrt(15/16)
  assert out.nc3_cos_mean[0] == pytest.approx(1.0, abs=1e-6)
  assert out.nc3_cos_mean[1] == pytest.approx(math.sqrt(15 / 16), abs=1e-6)
  assert np.isnan(out.nc1_cdnv[2]) and np.isnan(out.etf_error[2]) and np.isnan(out.nc3_cos_mean[2])


def test_host_wrappers_under_jit_name_the_function_to_use():
  feats, labels, w = make_data(12, v=10, d=4, n=60)
  feats, w = feats.astype(np.float32), w.astype(np.float32)
  with pytest.raises(TypeError, match="use sbjax.metrics.neural_collapse there"):
    jax.jit(lambda h: C.collapse_metrics(h, labels, w).nc1_cdnv)(feats)
  means, var, counts = ref_stats(feats, labels, 10)
  with pytest.raises(TypeError, match="use sbjax.metrics.neural_collapse_from_stats there"):
    jax.vmap(lambda m: C.collapse_metrics_from_stats(m, var, counts, w).nc1_cdnv)(means[None])
  got = float(jax.jit(lambda h: C.neural_collapse(h, labels, w).nc1_log10_mean_cdnv)(feats))
  assert got == pytest.approx(host(feats, labels, w)["nc1_log10_mean_cdnv"], rel=1e-5)
