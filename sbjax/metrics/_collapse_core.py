"""The neural-collapse statistics (internal): one pure-jnp core over V class rows with a
validity mask, shared by the host wrappers (``_collapse_host``) and the jit/vmap functions of
``_neural_collapse`` (one formula of each statistic).

Formulas (see the module doc of ``_neural_collapse``): with the analysed class means mu_c, their
global mean mu_G and mu~_c = mu_c - mu_G, n_c = ||mu~_c||; NC2 norm CoV = std(n_c) /
mean(n_c); NC3 cos(w_c, mu~_c); ||G||_F^2 = ||M~^T M~||_F^2 (d x d); dual error from
<W^T W, M~^T M~> and <W M~^T, I - 11^T/K>; the pair statistics from
:func:`sbjax.metrics._pairs.pair_pass`.  No host-side checks: undefined results (fewer
than 2 analysed classes, all class means identical) come out as NaN (:func:`finish`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._pairs import chan_result, lse_log_mean, lse_mean, pair_pass
from ._util import int_acc_dtype, masked_mean_std
from ._collapse_variants import corrected_sq_norms, norm_cov, unc3_guarded

_HI = lax.Precision.HIGHEST
VARIANT_KEYS = ("unc3_cos_cov_guarded", "nc3_cos_se", "unc3_ill_conditioned", "nc2_norm_cov_corrected",
                "nc2_corrected_n_classes", "nc2_corrected_n_clipped")


def cov(x, m, ddof):
  """std / mean over the mask; +inf when the mean is 0."""
  mean, std, _ = masked_mean_std(x, m, ddof)
  return jnp.where(mean != 0, std / jnp.where(mean != 0, mean, 1.0), jnp.inf)


def global_stats(mu, w, cnt, valid, *, weighted_mean, norm_variant, ddof, var=None):
  """The statistics over single classes (NC2 norms, NC3, ETF diagonal, dual error)."""
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
  u3 = unc3_guarded(cos3, valid, ddof=ddof)
  return {
      "mt": mt,
      "g_fro": safe_g,
      "max_norm": jnp.max(jnp.where(valid, nrm, 0.0)),
      "nc2_norm_cov": norm_cov(n2, valid, variant=norm_variant, ddof=ddof),
      "nc2_log_norm_cov": cov(lognorm, pos, ddof),
      "nc3_cos_mean": u3.cos_mean,
      "unc3_cos_cov": u3.raw,
      "unc3_cos_cov_guarded": u3.value,
      "nc3_cos_se": u3.cos_se,
      "unc3_ill_conditioned": u3.ill_conditioned,
      "dual_error": jnp.sqrt(jnp.maximum(dual2, 0.0)),
      "etf_diag": etf_diag,
      **_corrected_stats(mu, var, cnt, valid, weighted_mean=weighted_mean, norm_variant=norm_variant, ddof=ddof),
  }


def _corrected_stats(mu, var, cnt, valid, *, weighted_mean, norm_variant, ddof):
  """The bias-corrected norm CoV (``collapse_variants``); NaN without ``var``."""
  if var is None:
    nan = jnp.full((), jnp.nan, mu.dtype)
    return {"nc2_norm_cov_corrected": nan, "nc2_corrected_n_classes": jnp.zeros((), jnp.int32),
            "nc2_corrected_n_clipped": jnp.zeros((), jnp.int32)}
  cn = corrected_sq_norms(mu, var, cnt, valid, weighted_mean=weighted_mean)
  return {
      "nc2_norm_cov_corrected": norm_cov(cn.sq_norms, cn.valid, variant=norm_variant, ddof=ddof),
      "nc2_corrected_n_classes": cn.n_valid,
      "nc2_corrected_n_clipped": cn.n_clipped,
  }


def _valid_first(mu, var, w, cnt, valid, block):
  """Pad the rows to a multiple of the block and put the valid rows first (stable, so
  in class order); invalid rows are zeroed (NaN there cannot leak).  Returns the sorted
  (mu, var, w, cnt, valid) and ``order`` (sorted row -> original row)."""
  v = mu.shape[0]
  kpad = -(-v // block) * block
  pad = kpad - v
  mu, w = (jnp.pad(x, ((0, pad), (0, 0))) for x in (mu, w))
  var, cnt = (jnp.pad(x, (0, pad)) for x in (var, cnt))
  valid = jnp.pad(valid, (0, pad))
  order = jnp.argsort(~valid, stable=True)
  valid = valid[order]
  mu, w = (jnp.where(valid[:, None], x[order], 0.0) for x in (mu, w))
  var, cnt = (jnp.where(valid, x[order], 0.0) for x in (var, cnt))
  return mu, var, w, cnt, valid, order


@partial(
    jax.jit,
    static_argnames=("weighted_mean", "norm_variant", "ddof", "block", "cdnv_exponent", "angle_variant",
                     "gnc2_centered", "coincide_rtol", "riesz_s"),
)
def core(mu, var, w, cnt, valid, k, *, weighted_mean, norm_variant, ddof, block, cdnv_exponent, angle_variant,
         gnc2_centered, coincide_rtol, riesz_s=1.0):
  """Every statistic of the rows where ``valid`` (k of them), in one jit (keyed by V).

  mu, w: (V, d); var, cnt: (V,); valid: (V,) bool; k = sum(valid).  The rows are padded to
  a multiple of ``block`` and sorted valid-first inside; the per-class ``rows`` come back
  in the original row order (length V)."""
  v = mu.shape[0]
  mu, var, w, cnt, valid, order = _valid_first(mu, var, w, cnt, valid, block)
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
  out = {key: gs[key] for key in ("max_norm", "nc2_norm_cov", "nc2_log_norm_cov", "nc3_cos_mean", "unc3_cos_cov",
                                  "dual_error")}
  out.update({key: gs[key] for key in VARIANT_KEYS})
  out.update(
      cdnv=lse_mean(st["cdnv_lse"], st["cdnv_n"]), log_cdnv=lse_log_mean(st["cdnv_lse"], st["cdnv_n"]),
      cdnv_n=st["cdnv_n"], cdnv_coinc=st["cdnv_coinc"],
      cdnv_zero=st["cdnv_zero"], kernel_coinc=st["kernel_coinc"],
      l10_mean=l10_mean, l10_std=l10_std, l10_n=l10_n, ang_mean=ang_mean, ang_std=ang_std,
      ker_mean=ker_mean, ker_std=ker_std,
      riesz_log_mean=lse_log_mean(st["riesz_lse"], ker_n),
      etf=jnp.sqrt(jnp.maximum(gs["etf_diag"] + st["etf_off"], 0.0)),
      rows={key: jnp.zeros_like(r).at[order].set(r)[:v] for key, r in pp["rows"].items()},
  )
  return out


def finish(res, k, *, per_class: bool = False) -> dict:
  """The keys of ``collapse_metrics`` (jnp scalars) from :func:`core`'s result.

  Floating keys are NaN where the metrics are undefined (k < 2 or every centred mean
  zero); ``nc1_cdnv`` is +inf (and its log10 too) when every pair is coincident;
  ``nc1_log10_mean_cdnv`` is taken in log space (finite even where the mean overflows)."""
  it = int_acc_dtype()
  k = jnp.asarray(k).astype(it)
  bad = (k < 2) | ~(res["max_norm"] > 0)
  has = res["cdnv_n"] > 0
  mean_log10 = jnp.where(res["l10_n"] > 0, res["l10_mean"], -jnp.inf)
  f = {
      "nc1_cdnv": jnp.where(has, res["cdnv"], jnp.inf),
      "nc1_log10_mean_cdnv": jnp.where(has, res["log_cdnv"] / np.log(10.0), jnp.inf),
      "nc1_mean_log10_cdnv": mean_log10,
      "nc1_mean_log10_cdnv_std": res["l10_std"],
      "nc1_log10_cdnv": mean_log10,  # old name of nc1_mean_log10_cdnv (kept for old CSVs)
      "nc1_log10_cdnv_std": res["l10_std"],  # old name of nc1_mean_log10_cdnv_std
      "nc2_cos_mean": res["ang_mean"],
      "nc2_cos_std": res["ang_std"],
      "etf_error": res["etf"],
      "gnc2_log_kernel_mean": res["ker_mean"],
      "gnc2_log_kernel_var": jnp.square(res["ker_std"]),
      "gnc2_riesz_log_mean": res["riesz_log_mean"],
      "gnc2_riesz_mean": jnp.exp(res["riesz_log_mean"]),
      **{key: res[key] for key in ("nc2_norm_cov", "nc2_log_norm_cov", "nc2_norm_cov_corrected", "nc3_cos_mean",
                                   "unc3_cos_cov", "unc3_cos_cov_guarded", "nc3_cos_se", "dual_error")},
  }
  out = {key: jnp.where(bad, jnp.nan, x) for key, x in f.items()}
  out.update(
      nc1_n_pairs=k * (k - 1) // 2,
      nc1_n_coincident_pairs=res["cdnv_coinc"].astype(it),
      nc1_n_zero_pairs=res["cdnv_zero"].astype(it),
      nc2_corrected_n_classes=res["nc2_corrected_n_classes"].astype(it),
      nc2_corrected_n_clipped=res["nc2_corrected_n_clipped"].astype(it),
      gnc2_n_coincident_pairs=res["kernel_coinc"].astype(it),
      unc3_ill_conditioned=res["unc3_ill_conditioned"].astype(it),
      n_classes=k,
  )
  if per_class:
    out.update(per_class_rows(res["rows"], k))
  return out


def per_class_rows(rows, k) -> dict:
  """per_class_cdnv = CDNV row sums / counts (NaN without a partner), interference =
  cos row sums / (K - 1); length V, meaningful where ``class_analyzed``."""
  cnt = rows["cdnv_cnt"]
  return {
      "per_class_cdnv": jnp.where(cnt > 0, rows["cdnv_sum"] / jnp.maximum(cnt, 1), jnp.nan),
      "per_class_interference": rows["cos_sum"] / jnp.maximum(k - 1, 1).astype(cnt.dtype),
  }
