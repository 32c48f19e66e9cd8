"""Every neural-collapse statistic of V class rows with a validity mask, in one jitted pure-jnp
function (:func:`core`), shared by :func:`neural_collapse` and the host wrappers. The
statistics over single classes are computed here, those over pairs by
:func:`sbjax.metrics._pairs.pair_pass`; the formulas: :class:`CollapseStats` and
``docs/metrics.md`` section 3."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._collapse_variants import corrected_sq_norms, norm_cov, unc3_guarded
from ._pairs import lse_log_mean, pair_pass
from ._util import int_acc_dtype, mean_std, moments

_HI = lax.Precision.HIGHEST


def _cov(x, m, ddof):
  """std / mean over the mask; +inf when the mean is 0."""
  mean, std, _ = mean_std(moments(x, m), ddof)
  return jnp.where(mean != 0, std / jnp.where(mean != 0, mean, 1.0), jnp.inf)


def _single_class_stats(mu, var, w, cnt, valid, *, weighted_mean, norm_variant, ddof):
  """(centred means M~, ||G||_F, max ||mu~_c||, the ETF error's diagonal, and the statistics
  over single classes: NC2 norms, NC3, UNC3, the dual error)."""
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
  wn = jnp.linalg.norm(w, axis=1)
  den = wn * nrm
  cos3 = jnp.where(den > 0, jnp.sum(w * mt, axis=1) / jnp.where(den > 0, den, 1.0), 0.0)
  mtm = jnp.matmul(mt.T, mt, precision=_HI)  # ||G||_F^2 = ||M~^T M~||_F^2 (d x d)
  g_fro = jnp.sqrt(jnp.sum(mtm * mtm))
  safe_g = jnp.where(g_fro > 0, g_fro, 1.0)
  etf_diag = jnp.sum(jnp.where(valid, jnp.square(n2 / safe_g - (1.0 - 1.0 / kf) / jnp.sqrt(kf - 1.0)), 0.0))
  # dual error via <W^T W, M~^T M~> and <W M~^T, I - 11^T/K>
  wtw = jnp.matmul(w.T, w, precision=_HI)
  s_fro = jnp.sqrt(jnp.maximum(jnp.sum(wtw * mtm), 0.0))
  s_p = jnp.sum(w * mt) - jnp.dot(jnp.sum(w, 0), jnp.sum(mt, 0)) / kf
  dual2 = 2.0 - 2.0 * s_p / (jnp.where(s_fro > 0, s_fro, 1.0) * jnp.sqrt(kf - 1.0))
  u3 = unc3_guarded(cos3, valid, ddof=ddof)
  cn = corrected_sq_norms(mu, var, cnt, valid, weighted_mean=weighted_mean)
  return mt, safe_g, jnp.max(jnp.where(valid, nrm, 0.0)), etf_diag, {
      "nc2_norm_cov": norm_cov(n2, valid, variant=norm_variant, ddof=ddof),
      "nc2_log_norm_cov": _cov(jnp.log(jnp.where(pos, nrm, 1.0)), pos, ddof),
      "nc2_norm_cov_corrected": norm_cov(cn.sq_norms, cn.valid, variant=norm_variant, ddof=ddof),
      "nc3_cos_mean": u3.cos_mean,
      "unc3_cos_cov": u3.raw,
      "unc3_cos_cov_guarded": u3.value,
      "nc3_cos_se": u3.cos_se,
      "dual_error": jnp.sqrt(jnp.maximum(dual2, 0.0)),
  }, {"nc2_corrected_n_classes": cn.n_valid, "nc2_corrected_n_clipped": cn.n_clipped,
      "unc3_ill_conditioned": u3.ill_conditioned}


def _valid_first(mu, var, w, cnt, valid, block):
  """Pad the rows to a multiple of the block and put the valid rows first (stable, so
  in class order); invalid rows are zeroed (NaN there cannot leak).  Returns the sorted
  (mu, var, w, cnt, valid) and ``order`` (sorted row -> original row)."""
  pad = -(-mu.shape[0] // block) * block - mu.shape[0]
  mu, w = (jnp.pad(x, ((0, pad), (0, 0))) for x in (mu, w))
  var, cnt, valid = (jnp.pad(x, (0, pad)) for x in (var, cnt, valid))
  order = jnp.argsort(~valid, stable=True)
  valid = valid[order]
  mu, w = (jnp.where(valid[:, None], x[order], 0.0) for x in (mu, w))
  var, cnt = (jnp.where(valid, x[order], 0.0) for x in (var, cnt))
  return mu, var, w, cnt, valid, order


@partial(
    jax.jit,
    static_argnames=("weighted_mean", "norm_variant", "ddof", "block", "cdnv_exponent", "angle_variant",
                     "gnc2_centered", "coincide_rtol", "riesz_s", "per_class"),
)
def core(mu, var, w, cnt, valid, k, *, weighted_mean, norm_variant, ddof, block, cdnv_exponent, angle_variant,
         gnc2_centered, coincide_rtol, riesz_s=1.0, per_class=False):
  """({field: value} of :class:`CollapseStats` but ``class_analyzed`` and ``nc4_agreement``,
  max ||mu~_c||) of the k rows where ``valid``: mu, w (V, d); var, cnt (V,); valid (V,) bool.
  NaN where undefined (k < 2 or every centred mean zero); ``nc1_cdnv`` is +inf when every pair
  is coincident; ``nc1_log10_mean_cdnv`` is taken in log space (finite where the mean overflows)."""
  v = mu.shape[0]
  mu, var, w, cnt, valid, order = _valid_first(mu, var, w, cnt, valid, block)
  mt, g_fro, max_norm, etf_diag, single, counts = _single_class_stats(
      mu, var, w, cnt, valid, weighted_mean=weighted_mean, norm_variant=norm_variant, ddof=ddof)
  st, rows = pair_pass(mt, mu, var, valid, g_fro, k, block=block, cdnv_exponent=cdnv_exponent,
                       angle_variant=angle_variant, gnc2_centered=gnc2_centered, coincide_rtol=coincide_rtol,
                       riesz_s=riesz_s)
  l10_mean, l10_std, l10_n = mean_std(st["log10_cdnv"], ddof)
  ang_mean, ang_std, _ = mean_std(st["angle"], ddof)
  ker_mean, ker_std, ker_n = mean_std(st["kernel"], ddof)
  log_cdnv = lse_log_mean(st["cdnv_lse"], st["cdnv_n"])
  riesz_log_mean = lse_log_mean(st["riesz_lse"], ker_n)
  has = st["cdnv_n"] > 0
  mean_log10 = jnp.where(l10_n > 0, l10_mean, -jnp.inf)
  floating = {
      "nc1_cdnv": jnp.where(has, jnp.exp(log_cdnv), jnp.inf),
      "nc1_log10_mean_cdnv": jnp.where(has, log_cdnv / np.log(10.0), jnp.inf),
      "nc1_mean_log10_cdnv": mean_log10,
      "nc1_mean_log10_cdnv_std": l10_std,
      "nc1_log10_cdnv": mean_log10,  # old name of nc1_mean_log10_cdnv (kept for old CSVs)
      "nc1_log10_cdnv_std": l10_std,  # old name of nc1_mean_log10_cdnv_std
      "nc2_cos_mean": ang_mean,
      "nc2_cos_std": ang_std,
      "etf_error": jnp.sqrt(jnp.maximum(etf_diag + st["etf_off"], 0.0)),
      "gnc2_log_kernel_mean": ker_mean,
      "gnc2_log_kernel_var": jnp.square(ker_std),
      "gnc2_riesz_log_mean": riesz_log_mean,
      "gnc2_riesz_mean": jnp.exp(riesz_log_mean),
      **single,
  }
  it = int_acc_dtype()
  k = jnp.asarray(k).astype(it)
  bad = (k < 2) | ~(max_norm > 0)
  out = {key: jnp.where(bad, jnp.nan, x) for key, x in floating.items()}
  out.update({key: x.astype(it) for key, x in counts.items()},
             nc1_n_pairs=k * (k - 1) // 2, nc1_n_coincident_pairs=st["cdnv_coinc"].astype(it),
             nc1_n_zero_pairs=st["cdnv_zero"].astype(it), gnc2_n_coincident_pairs=st["kernel_coinc"].astype(it),
             n_classes=k)
  if per_class:  # CDNV row sums / counts (NaN without a partner); cos row sums / (K - 1)
    cdnv_sum, cdnv_cnt, cos_sum = (jnp.zeros_like(r).at[order].set(r)[:v] for r in rows)
    out["per_class_cdnv"] = jnp.where(cdnv_cnt > 0, cdnv_sum / jnp.maximum(cdnv_cnt, 1), jnp.nan)
    out["per_class_interference"] = cos_sum / jnp.maximum(k - 1, 1).astype(cdnv_cnt.dtype)
  return out, max_norm
