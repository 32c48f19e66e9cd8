"""Tests for sbjax.metrics.spectrum against plain numpy references."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbjax.metrics import spectrum as S


# ---------------------------------------------------------------- references
def ref_p(s):
    s = np.asarray(s, np.float64)
    return s / s.sum()


def ref_entropy(s):
    p = ref_p(s)
    return -sum(pi * math.log(pi) for pi in p if pi > 0)


def ref_kl(s):
    p = ref_p(s)
    n = len(p)
    return sum(pi * math.log(n * pi) for pi in p if pi > 0)


def ref_erank(s):
    return math.exp(ref_entropy(s))


def ref_w_error(s, d):
    s = np.asarray(s, np.float64)
    return math.sqrt(sum(x * x for x in s[d:])) / math.sqrt(sum(x * x for x in s))


def ref_spectrum(w):
    return np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)


def rand_mat(rng, shape, cond=None):
    a = rng.normal(size=shape)
    if cond is not None:  # graded spectrum sigma_1/sigma_n = cond
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        s = np.geomspace(1.0, 1.0 / cond, min(shape))
        a = (u * s) @ vt
    return a


_jsv = jax.jit(S.singular_values, static_argnums=1)
_jmetrics = jax.jit(S.spectrum_metrics, static_argnames=("r", "k"))

SHAPES = [(700, 256), (50, 8), (8, 33), (64, 64)]


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
    w = rand_mat(rng, shape, cond=10.0)
    wq = jnp.asarray(w, dtype)
    ref = ref_spectrum(np.asarray(wq.astype(jnp.float32), np.float64))  # exact sigma of the rounded input
    s = np.asarray(_jsv(wq, method))
    assert s.dtype == np.float32
    # stated float32 tolerance: 1e-4 relative to sigma_1 (cond 10 -> all well resolved)
    np.testing.assert_allclose(s, ref, rtol=0, atol=1e-4 * ref[0])


def test_gram_refine_improves_mid_range_singular_values():
    rng = np.random.default_rng(2)
    w = rand_mat(rng, (400, 40), cond=1e3).astype(np.float32)
    ref = ref_spectrum(w.astype(np.float64))
    s_g = np.asarray(S.singular_values(w, "gram"))
    s_r = np.asarray(S.singular_values(w, "gram_refine"))
    rel_g = np.abs(s_g - ref) / ref
    rel_r = np.abs(s_r - ref) / ref
    assert rel_g[:5].max() < 1e-5 and rel_r[:5].max() < 1e-5
    # sigma in [~5e-3, ~3e-2] sigma_1: plain f32 gram loses digits, the refinement recovers them
    mid = slice(20, 36)
    assert rel_g[mid].max() > 1e-5
    assert np.median(rel_r[mid]) < np.median(rel_g[mid]) / 10
    # float64 gram is accurate all the way down
    with jax.enable_x64(True):
        s64 = np.asarray(S.singular_values(jnp.asarray(w, jnp.float64), "gram64"))
    np.testing.assert_allclose(s64, ref, rtol=1e-6)


def test_gram64_without_x64_falls_back_to_svd():
    w = np.random.default_rng(3).normal(size=(30, 6)).astype(np.float32)
    with pytest.warns(UserWarning, match="needs jax_enable_x64"):
        s = S.singular_values(w, "gram64")
    np.testing.assert_allclose(np.asarray(s), ref_spectrum(w), rtol=1e-5)


def test_singular_values_bad_args():
    with pytest.raises(ValueError, match="unknown method"):
        S.singular_values(np.ones((3, 2)), "qr")
    with pytest.raises(ValueError, match="2-D"):
        S.singular_values(np.ones((3, 2, 2)))


def test_rank_deficient_no_nan():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(60, 3)) @ rng.normal(size=(3, 12))  # rank 3
    for method in ["gram", "gram_refine", "svd"]:
        s = np.asarray(_jsv(w.astype(np.float32), method))
        assert np.all(np.isfinite(s)) and np.all(s >= 0)
        assert np.all(s[3:] <= 1e-3 * s[0])
        m = _jmetrics(jnp.asarray(s), d=2, k=5)
        for key in ("kl_to_uniform", "effective_rank", "stable_rank", "proportional_effective_rank", "w_error"):
            assert np.isfinite(float(m[key])), key
    z = np.zeros((10, 4), np.float32)
    s = S.singular_values(z)
    assert np.all(np.asarray(s) == 0)
    assert float(S.kl_to_uniform(s)) == pytest.approx(math.log(4))
    assert float(S.effective_rank(s)) == 0.0
    assert float(S.stable_rank(s)) == 0.0
    assert float(S.w_error(s, 1)) == 0.0
    assert float(S.condition_number(s)) == math.inf
    assert np.all(np.asarray(S.normalized_top(s, 3)) == 0)


# ---------------------------------------------------------------- scalar metrics
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
        per_r = float(jax.jit(S.proportional_effective_rank, static_argnums=1)(sj, r))
    np.testing.assert_allclose(float(m["kl_to_uniform"]), ref_kl(s), rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(float(m["singular_entropy"]), ref_entropy(s), rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(float(m["effective_rank"]), ref_erank(s), rtol=1e-5)
    np.testing.assert_allclose(float(m["proportional_effective_rank"]), ref_erank(s) / n, rtol=1e-5)
    np.testing.assert_allclose(per_r, ref_erank(s[:r]) / r, rtol=1e-5)
    np.testing.assert_allclose(float(m["stable_rank"]), (s**2).sum() / s[0] ** 2, rtol=1e-5)
    want = [ref_w_error(s, min(d, n)) for d in ds]
    np.testing.assert_allclose(np.asarray(m["w_error"]), want, rtol=1e-5, atol=1e-12)
    cond = float(m["condition_number"])
    assert cond == (math.inf if s[-1] == 0 else pytest.approx(s[0] / s[-1], rel=1e-5))
    top = np.asarray(m["normalized_top"])
    np.testing.assert_allclose(top[: min(3, n)], (s / s[0])[:3], rtol=1e-6)


def test_metrics_float32_tolerance():
    rng = np.random.default_rng(9)
    s = np.sort(rng.exponential(size=100))[::-1].astype(np.float32)
    assert float(S.kl_to_uniform(s)) == pytest.approx(ref_kl(s), rel=1e-4, abs=1e-5)
    assert float(S.effective_rank(s)) == pytest.approx(ref_erank(s), rel=1e-5)
    assert float(S.w_error(s, 10)) == pytest.approx(ref_w_error(s, 10), rel=1e-5)


def test_analytic_rank1_and_orthogonal():
    rng = np.random.default_rng(5)
    u, v = rng.normal(size=(40, 1)), rng.normal(size=(1, 16))
    s1 = S.singular_values((u @ v).astype(np.float32))
    assert float(S.kl_to_uniform(s1)) == pytest.approx(math.log(16), abs=1e-3)
    assert float(S.effective_rank(s1)) == pytest.approx(1.0, abs=1e-3)
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    so = S.singular_values(q.astype(np.float32))
    np.testing.assert_allclose(np.asarray(so), 1.0, atol=1e-5)
    assert float(S.kl_to_uniform(so)) == pytest.approx(0.0, abs=1e-6)
    assert float(S.effective_rank(so)) == pytest.approx(16.0, rel=1e-5)
    assert float(S.proportional_effective_rank(so)) == pytest.approx(1.0, rel=1e-5)
    assert float(S.w_error(so, 8)) == pytest.approx(math.sqrt(0.5), rel=1e-5)
    assert float(S.condition_number(so)) == pytest.approx(1.0, rel=1e-5)


def test_normalized_top_padding_and_per_bad_r():
    s = jnp.asarray([4.0, 2.0, 1.0])
    top = np.asarray(S.normalized_top(s, 5))
    np.testing.assert_allclose(top[:3], [1.0, 0.5, 0.25])
    assert np.all(np.isnan(top[3:]))
    assert np.all(np.asarray(S.normalized_top(s, 5, pad_value=0.0))[3:] == 0)
    np.testing.assert_allclose(np.asarray(S.normalized_top(s, 2)), [1.0, 0.5])
    with pytest.raises(ValueError, match="must be in"):
        S.proportional_effective_rank(s, 4)
    assert float(S.condition_number(s, tol=0.3)) == math.inf
    assert float(S.condition_number(s)) == pytest.approx(4.0)


# ---------------------------------------------------------------- properties
@settings(max_examples=10, deadline=None)
@given(v=st.sampled_from([3, 20]), d=st.sampled_from([2, 7]), seed=st.integers(0, 2**31 - 1))
def test_spectrum_invariant_to_orthogonal_transforms(v, d, seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(v, d))
    q1, _ = np.linalg.qr(rng.normal(size=(v, v)))
    q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
    with jax.enable_x64(True):
        a = _jsv(jnp.asarray(w))
        b = _jsv(jnp.asarray(q1 @ w @ q2))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(float(S.kl_to_uniform(a)), float(S.kl_to_uniform(b)), rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(float(S.effective_rank(a)), float(S.effective_rank(b)), rtol=1e-7)
        np.testing.assert_allclose(np.asarray(a), ref_spectrum(w), rtol=1e-5, atol=1e-10)


def test_vmap_16_heads_matches_separate_calls():
    rng = np.random.default_rng(6)
    heads = rng.normal(size=(16, 96, 24)).astype(np.float32) * rng.uniform(0.5, 2, size=(16, 1, 24)).astype(np.float32)

    def all_metrics(w):
        s = S.singular_values(w)
        return S.spectrum_metrics(s, d=jnp.asarray([4, 8]), r=12, k=30), s

    batched, sb = jax.jit(jax.vmap(all_metrics))(heads)
    one = jax.jit(all_metrics)
    for h in range(16):
        single, s1 = one(heads[h])
        np.testing.assert_allclose(np.asarray(sb[h]), np.asarray(s1), rtol=2e-5)
        for k in single:
            np.testing.assert_allclose(np.asarray(batched[k][h]), np.asarray(single[k]), rtol=2e-5, err_msg=k)
        np.testing.assert_allclose(np.asarray(sb[h]), ref_spectrum(heads[h]), rtol=1e-4)
