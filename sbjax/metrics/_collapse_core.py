"""Kernels of :mod:`sbjax.metrics.collapse` (internal): the global statistics and the
jitted core after the class selection, and the token streaming of ``collapse_metrics``.

Formulas (see the module doc of ``collapse``): with the analysed class means mu_c, their
global mean mu_G and mu~_c = mu_c - mu_G, n_c = ||mu~_c||; NC2 norm CoV = std(n_c) /
mean(n_c); NC3 cos(w_c, mu~_c); ||G||_F^2 = ||M~^T M~||_F^2 (d x d); dual error from
<W^T W, M~^T M~> and <W M~^T, I - 11^T/K>; the pair statistics from
:func:`sbjax.metrics._pairs.pair_pass`.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._pairs import chan_result, lse_log_mean, lse_mean, pair_pass
from .accumulators import mean_update, nc4_update, var_update
from .collapse_variants import corrected_sq_norms, norm_cov, unc3_guarded

_HI = lax.Precision.HIGHEST
VARIANT_KEYS = ("unc3_cos_cov_guarded", "nc3_cos_se", "unc3_ill_conditioned", "nc2_norm_cov_corrected",
                "nc2_corrected_n_classes", "nc2_corrected_n_clipped")


def mstd(x, m, ddof):
    n = jnp.sum(m).astype(x.dtype)
    mean = jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(n, 1)
    var = jnp.sum(jnp.where(m, jnp.square(x - mean), 0.0)) / jnp.maximum(n - ddof, 1)
    return mean, jnp.sqrt(var)


def cov(x, m, ddof):
    mean, std = mstd(x, m, ddof)
    return jnp.where(mean != 0, std / jnp.where(mean != 0, mean, 1.0), jnp.inf)


def global_stats(mu, w, cnt, valid, *, weighted_mean, norm_variant, ddof, var=None):
    dt = mu.dtype
    vf = valid.astype(dt)
    kf = jnp.sum(vf)
    if weighted_mean:
        wts = cnt.astype(dt) * vf
        mu_g = jnp.sum(mu * wts[:, None], axis=0) / jnp.sum(wts)
    else:
        mu_g = jnp.sum(mu * vf[:, None], axis=0) / kf
    mt = jnp.where(valid[:, None], mu - mu_g, 0.0)
    w = jnp.where(valid[:, None], w, 0.0)
    n2 = jnp.sum(mt * mt, axis=1)
    nrm = jnp.sqrt(n2)
    x = nrm if norm_variant == "norm" else n2
    pos = valid & (nrm > 0)
    lognorm = jnp.log(jnp.where(pos, nrm, 1.0))
    wn = jnp.linalg.norm(w, axis=1)
    den = wn * nrm
    cos3 = jnp.where(den > 0, jnp.sum(w * mt, axis=1) / jnp.where(den > 0, den, 1.0), 0.0)
    # ||G||_F^2 = ||M~^T M~||_F^2 (d x d)
    mtm = jnp.matmul(mt.T, mt, precision=_HI)
    g_fro = jnp.sqrt(jnp.sum(mtm * mtm))
    safe_g = jnp.where(g_fro > 0, g_fro, 1.0)
    etf_diag = jnp.sum(jnp.where(valid, jnp.square(n2 / safe_g - (1.0 - 1.0 / kf) / jnp.sqrt(kf - 1.0)), 0.0))
    # dual error via <W^T W, M~^T M~> and <W M~^T, P>
    wtw = jnp.matmul(w.T, w, precision=_HI)
    s_fro = jnp.sqrt(jnp.maximum(jnp.sum(wtw * mtm), 0.0))
    s_p = jnp.sum(w * mt) - jnp.dot(jnp.sum(w, 0), jnp.sum(mt, 0)) / kf
    dual2 = 2.0 - 2.0 * s_p / (jnp.where(s_fro > 0, s_fro, 1.0) * jnp.sqrt(kf - 1.0))
    nc3_mean, nc3_std = mstd(cos3, valid, ddof)
    return {
        "mt": mt,
        "g_fro": safe_g,
        "max_norm": jnp.max(jnp.where(valid, nrm, 0.0)),
        "nc2_norm_cov": cov(x, valid, ddof),
        "nc2_log_norm_cov": cov(lognorm, pos, ddof),
        "nc3_cos_mean": nc3_mean,
        "nc3_cos_std": nc3_std,
        "unc3_cos_cov": jnp.where(nc3_mean != 0, nc3_std / jnp.where(nc3_mean != 0, nc3_mean, 1.0), jnp.inf),
        "dual_error": jnp.sqrt(jnp.maximum(dual2, 0.0)),
        "etf_diag": etf_diag,
        "k": kf,
        **_variant_stats(mu, var, cnt, valid, cos3, weighted_mean=weighted_mean, norm_variant=norm_variant, ddof=ddof),
    }


def _variant_stats(mu, var, cnt, valid, cos3, *, weighted_mean, norm_variant, ddof):
    """The corrected norm CoV and the guarded UNC3 (``collapse_variants``); NaN without ``var``."""
    u3 = unc3_guarded(cos3, valid, ddof=ddof)
    out = {"unc3_cos_cov_guarded": u3.value, "nc3_cos_se": u3.cos_se, "unc3_ill_conditioned": u3.ill_conditioned}
    if var is None:
        nan = jnp.full((), jnp.nan, mu.dtype)
        return {**out, "nc2_norm_cov_corrected": nan, "nc2_corrected_n_classes": jnp.zeros((), jnp.int32), "nc2_corrected_n_clipped": jnp.zeros((), jnp.int32)}
    cn = corrected_sq_norms(mu, var, cnt, valid, weighted_mean=weighted_mean)
    return {
        **out,
        "nc2_norm_cov_corrected": norm_cov(cn.sq_norms, cn.valid, variant=norm_variant, ddof=ddof),
        "nc2_corrected_n_classes": cn.n_valid,
        "nc2_corrected_n_clipped": cn.n_clipped,
    }


def check_finite(name, x):
    x = np.asarray(x)
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN/inf); clean the input before computing collapse metrics")


def pad_rows(x, kpad):
    pad = [(0, kpad - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
    return np.pad(x, pad)


@partial(
    jax.jit,
    static_argnames=("weighted_mean", "norm_variant", "ddof", "block", "cdnv_exponent", "angle_variant", "gnc2_centered", "coincide_rtol", "riesz_s"),
)
def core(mu, var, w, cnt, valid, k, *, weighted_mean, norm_variant, ddof, block, cdnv_exponent, angle_variant, gnc2_centered, coincide_rtol, riesz_s=1.0):
    """Everything after the class selection, in one jit (keyed by the padded K)."""
    gs = global_stats(mu, w, cnt, valid, weighted_mean=weighted_mean, norm_variant=norm_variant, ddof=ddof, var=var)
    pp = pair_pass(
        gs["mt"], mu, var, valid, gs["g_fro"], k,
        block=block, cdnv_exponent=cdnv_exponent, angle_variant=angle_variant,
        gnc2_centered=gnc2_centered, coincide_rtol=coincide_rtol, riesz_s=riesz_s,
    )
    st = pp["stats"]
    l10_mean, l10_std, l10_n = chan_result(st["log10_cdnv"], ddof)
    ang_mean, ang_std, _ = chan_result(st["angle"], ddof)
    ker_mean, ker_std, ker_n = chan_result(st["kernel"], ddof)
    out = {key: gs[key] for key in ("max_norm", "nc2_norm_cov", "nc2_log_norm_cov", "nc3_cos_mean", "unc3_cos_cov", "dual_error")}
    out.update({key: gs[key] for key in VARIANT_KEYS})
    out.update(
        cdnv=lse_mean(st["cdnv_lse"], st["cdnv_n"]), cdnv_n=st["cdnv_n"], cdnv_coinc=st["cdnv_coinc"],
        cdnv_zero=st["cdnv_zero"], kernel_coinc=st["kernel_coinc"],
        l10_mean=l10_mean, l10_std=l10_std, l10_n=l10_n, ang_mean=ang_mean, ang_std=ang_std,
        ker_mean=ker_mean, ker_std=ker_std,
        riesz_log_mean=lse_log_mean(st["riesz_lse"], ker_n),
        etf=jnp.sqrt(jnp.maximum(gs["etf_diag"] + st["etf_off"], 0.0)),
        rows=pp["rows"],
    )
    return out


@partial(jax.jit, static_argnames=())
def jit_mean_update(st, h, y, m):
    return mean_update(st, h, y, m)


@jax.jit
def jit_var_update(st, h, y, mu, m):
    return var_update(st, h, y, mu, m)


@partial(jax.jit, static_argnames=("chunk_size",))
def jit_nc4_update(st, h, y, w, mu, wv, mv, m, chunk_size):
    return nc4_update(st, h, y, w, mu, w_valid=wv, mean_valid=mv, valid=m, chunk_size=chunk_size)


def batches(feats, labels, batch_size):
    n = feats.shape[0]
    bs = int(min(batch_size, max(n, 1)))
    for s in range(0, n, bs):
        h = feats[s : s + bs]
        y = labels[s : s + bs]
        m = np.ones((h.shape[0],), bool)
        if h.shape[0] < bs:  # pad to a static batch shape
            p = bs - h.shape[0]
            h = np.concatenate([np.asarray(h), np.zeros((p, h.shape[1]), np.asarray(h).dtype)])
            y = np.concatenate([np.asarray(y), np.zeros((p,), np.asarray(y).dtype)])
            m = np.concatenate([m, np.zeros((p,), bool)])
        yield jnp.asarray(h), jnp.asarray(y), jnp.asarray(m)


def check_inputs(name, feats, labels, v, d):
    if feats.ndim != 2 or feats.shape[1] != d:
        raise ValueError(f"{name} features must have shape (N, {d}), got {feats.shape}")
    if labels.ndim != 1 or labels.shape[0] != feats.shape[0]:
        raise ValueError(f"{name} labels must have shape ({feats.shape[0]},), got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} labels must be integers, got dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= v):
        raise ValueError(f"{name} labels must lie in [0, V={v}); found values in [{labels.min()}, {labels.max()}]")
    check_finite(f"{name} features", np.asarray(feats, np.float32) if feats.dtype.itemsize < 4 else feats)


def scalar_metrics(res, k: int) -> dict:
    """The scalar keys of :func:`metrics_from_stats` from the jitted core's result."""
    cdnv = float(res["cdnv"])
    mean_log10 = float(res["l10_mean"]) if float(res["l10_n"]) > 0 else float("-inf")
    return {
        "nc1_cdnv": cdnv if int(res["cdnv_n"]) > 0 else float("inf"),
        "nc1_log10_mean_cdnv": math.log10(cdnv) if cdnv > 0 else float("-inf"),
        "nc1_mean_log10_cdnv": mean_log10,
        "nc1_mean_log10_cdnv_std": float(res["l10_std"]),
        "nc1_log10_cdnv": mean_log10,  # old name of nc1_mean_log10_cdnv (kept for old CSVs)
        "nc1_log10_cdnv_std": float(res["l10_std"]),  # old name of nc1_mean_log10_cdnv_std
        "nc1_n_pairs": k * (k - 1) // 2,
        "nc1_n_coincident_pairs": int(res["cdnv_coinc"]),
        "nc1_n_zero_pairs": int(res["cdnv_zero"]),
        "nc2_norm_cov": float(res["nc2_norm_cov"]),
        "nc2_log_norm_cov": float(res["nc2_log_norm_cov"]),
        "nc2_norm_cov_corrected": float(res["nc2_norm_cov_corrected"]),
        "nc2_corrected_n_classes": int(res["nc2_corrected_n_classes"]),
        "nc2_corrected_n_clipped": int(res["nc2_corrected_n_clipped"]),
        "nc2_cos_mean": float(res["ang_mean"]),
        "nc2_cos_std": float(res["ang_std"]),
        "etf_error": float(res["etf"]),
        "gnc2_log_kernel_mean": float(res["ker_mean"]),
        "gnc2_log_kernel_var": float(res["ker_std"]) ** 2,
        "gnc2_n_coincident_pairs": int(res["kernel_coinc"]),
        "gnc2_riesz_log_mean": float(res["riesz_log_mean"]),
        "gnc2_riesz_mean": float(np.exp(np.float64(res["riesz_log_mean"]))),
        "nc3_cos_mean": float(res["nc3_cos_mean"]),
        "unc3_cos_cov": float(res["unc3_cos_cov"]),
        "unc3_cos_cov_guarded": float(res["unc3_cos_cov_guarded"]),
        "nc3_cos_se": float(res["nc3_cos_se"]),
        "unc3_ill_conditioned": int(res["unc3_ill_conditioned"]),
        "dual_error": float(res["dual_error"]),
        "n_classes": k,
    }


def per_class_rows(rows, k: int) -> dict:
    """per_class_cdnv = CDNV row sums / counts (NaN without a partner), interference =
    cos row sums / (K - 1)."""
    out = {}
    cnt = np.asarray(rows["cdnv_cnt"][:k])
    with np.errstate(invalid="ignore", divide="ignore"):
        out["per_class_cdnv"] = np.where(cnt > 0, np.asarray(rows["cdnv_sum"][:k]) / np.maximum(cnt, 1), np.nan)
    out["per_class_interference"] = np.asarray(rows["cos_sum"][:k]) / (k - 1)
    return out
