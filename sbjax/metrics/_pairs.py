"""Blocked streaming over unordered class pairs c < c' (never builds K x K).

Internal module used by :mod:`sbjax.metrics._collapse_core`.  The class rows are
padded to K_pad = nb * B (B = block size) with a validity mask, the K valid rows
first; a ``fori_loop`` runs over the block pairs (I <= J) that hold valid rows
(ceil(K/B) (ceil(K/B) + 1) / 2 of the nb (nb + 1) / 2) and keeps only running
statistics, so peak memory is O(K_pad d + B^2).  Within a diagonal block only the
strict upper triangle is used; padded and invalid rows are masked out.

Running statistics:

* signed statistics (cos, log10 CDNV, log kernel, ...): Chan et al.'s
  parallel (count, mean, M2) merge -- numerically stable, no sum-of-squares
  cancellation;
* positive, possibly huge statistics (CDNV itself): a log-domain
  (max, sum exp(l - max), sum exp(2 (l - max))) accumulator, so float32 never
  overflows unless the true mean does.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

_HI = lax.Precision.HIGHEST


# ----------------------------------------------------------------- running stats
def chan_init(dt):
  z = jnp.zeros((), dt)
  return (z, z, z)  # count, mean, M2


def chan_block(x, m, dt):
  n = jnp.sum(m).astype(dt)
  s = jnp.sum(jnp.where(m, x, 0.0))
  mean = s / jnp.maximum(n, 1)
  m2 = jnp.sum(jnp.where(m, jnp.square(x - mean), 0.0))
  return (n, mean, m2)


def chan_merge(a, b):
  na, ma, qa = a
  nb, mb, qb = b
  n = na + nb
  safe = jnp.maximum(n, 1)
  delta = mb - ma
  mean = ma + delta * nb / safe
  m2 = qa + qb + jnp.square(delta) * na * nb / safe
  return (n, jnp.where(n > 0, mean, 0.0), m2)


def chan_result(st, ddof):
  n, mean, m2 = st
  var = m2 / jnp.maximum(n - ddof, 1)
  return mean, jnp.sqrt(jnp.maximum(var, 0.0)), n


def lse_init(dt):
  return (jnp.array(-jnp.inf, dt), jnp.zeros((), dt), jnp.zeros((), dt))


def lse_block(logx, m, dt):
  mx = jnp.max(jnp.where(m, logx, -jnp.inf))
  base = jnp.where(jnp.isfinite(mx), mx, 0.0)
  z = jnp.where(m, logx - base, -jnp.inf)
  return (mx, jnp.sum(jnp.exp(z)), jnp.sum(jnp.exp(2.0 * z)))


def lse_merge(a, b):
  ma, s1a, s2a = a
  mb, s1b, s2b = b
  m = jnp.maximum(ma, mb)
  base = jnp.where(jnp.isfinite(m), m, 0.0)
  fa = jnp.where(jnp.isfinite(ma), jnp.exp(ma - base), 0.0)
  fb = jnp.where(jnp.isfinite(mb), jnp.exp(mb - base), 0.0)
  return (m, s1a * fa + s1b * fb, s2a * fa * fa + s2b * fb * fb)


def lse_mean(st, n):
  """mean = (1/n) sum x over n terms (terms with x = 0 count in n only)."""
  m, s1, _ = st
  base = jnp.where(jnp.isfinite(m), m, 0.0)
  safe_n = jnp.maximum(n, 1)
  return jnp.where(s1 > 0, jnp.exp(base + jnp.log(jnp.where(s1 > 0, s1, 1.0)) - jnp.log(safe_n)), 0.0)


def lse_log_mean(st, n):
  """log of the mean (1/n) sum x, kept in log space (never overflows); -inf if empty."""
  m, s1, _ = st
  base = jnp.where(jnp.isfinite(m), m, 0.0)
  safe_n = jnp.maximum(n, 1)
  return jnp.where(s1 > 0, base + jnp.log(jnp.where(s1 > 0, s1, 1.0)) - jnp.log(safe_n), -jnp.inf)


# ----------------------------------------------------------------- the pass
def _block_pairs(nb):
  """Block pairs I <= J ordered by J, then I: the pairs among the first m blocks are the
  first m (m + 1) / 2 entries, so a pass over K valid leading rows stops there."""
  jj, ii = np.triu_indices(nb)
  ii, jj = jj, ii  # (J, I) row-major = (I, J) column-major
  order = np.lexsort((ii, jj))
  return jnp.asarray(ii[order], jnp.int32), jnp.asarray(jj[order], jnp.int32)


def _pair_terms(a, b, na2, nb2, nna, nnb, va, vb, pm, ua, ub, g_fro, etf_off, *, cdnv_exponent, angle_variant,
                coincide_rtol, riesz_s):
  """Per-pair quantities of one block pair (B x B each; see the module doc of collapse).

  With g = <mu~_c, mu~_c'>: d2 = ||mu~_c||^2 + ||mu~_c'||^2 - 2 g (clamped at 0); CDNV
  log s = log((sigma_c^2 + sigma_c'^2) / 2) - k log d2; cos = g / (||mu~_c|| ||mu~_c'||);
  kernel = -log ||u_c - u_c'|| = -0.5 log(2 - 2 <u_c, u_c'>); Riesz log ||u_c - u_c'||^-s;
  ETF residual (g / ||G||_F + 1 / (K sqrt(K - 1)))^2 off the diagonal.
  """
  g = jnp.matmul(a, b.T, precision=_HI)
  sumsq = na2[:, None] + nb2[None, :]
  d2 = jnp.maximum(sumsq - 2.0 * g, 0.0)
  coinc = d2 <= coincide_rtol * sumsq
  cvalid = pm & ~coinc
  vs = 0.5 * (va[:, None] + vb[None, :])
  pos = cvalid & (vs > 0)
  logs = jnp.log(jnp.where(pos, vs, 1.0)) - float(cdnv_exponent) * jnp.log(jnp.where(cvalid, d2, 1.0))
  den = nna[:, None] * nnb[None, :]
  cos = jnp.where(den > 0, g / jnp.where(den > 0, den, 1.0), 0.0)
  ucos = cos if ua is None else jnp.matmul(ua, ub.T, precision=_HI)
  ku2 = jnp.maximum(2.0 - 2.0 * ucos, 0.0)
  kcoinc = ku2 <= coincide_rtol * 4.0
  kval = pm & ~kcoinc
  log_ku2 = jnp.log(jnp.where(kval, ku2, 1.0))
  return {
      "coinc": coinc, "cvalid": cvalid, "pos": pos, "logs": logs,
      "s_val": jnp.where(pos, jnp.exp(logs), 0.0), "cos": cos,
      "angle": cos if angle_variant == "cos" else g,
      "kcoinc": kcoinc, "kval": kval, "kern": -0.5 * log_ku2,
      "log_riesz": (-0.5 * float(riesz_s)) * log_ku2,  # log ||u_c - u_c'||^-s, summed in log space
      "etf": jnp.where(pm, jnp.square(g / g_fro + etf_off), 0.0),
  }


def _merge_stats(st, t, pm, dt):
  """Running statistics after one block pair's terms ``t`` (pair mask ``pm``)."""
  return {
      "cdnv_lse": lse_merge(st["cdnv_lse"], lse_block(t["logs"], t["pos"], dt)),
      "cdnv_n": st["cdnv_n"] + jnp.sum(t["cvalid"]).astype(dt),
      "cdnv_coinc": st["cdnv_coinc"] + jnp.sum(pm & t["coinc"]).astype(jnp.int32),
      "cdnv_zero": st["cdnv_zero"] + jnp.sum(t["cvalid"] & ~t["pos"]).astype(jnp.int32),
      "log10_cdnv": chan_merge(st["log10_cdnv"], chan_block(t["logs"] / np.log(10.0), t["pos"], dt)),
      "angle": chan_merge(st["angle"], chan_block(t["angle"], pm, dt)),
      "kernel": chan_merge(st["kernel"], chan_block(t["kern"], t["kval"], dt)),
      "kernel_coinc": st["kernel_coinc"] + jnp.sum(pm & t["kcoinc"]).astype(jnp.int32),
      "riesz_lse": lse_merge(st["riesz_lse"], lse_block(t["log_riesz"], t["kval"], dt)),
      "etf_off": st["etf_off"] + 2.0 * jnp.sum(t["etf"]),
  }


def _init_carry(dt, kpad):
  zi = jnp.zeros((), jnp.int32)
  z = jnp.zeros((), dt)
  return {
      "stats": {
          "cdnv_lse": lse_init(dt),
          "cdnv_n": z,
          "cdnv_coinc": zi,
          "cdnv_zero": zi,
          "log10_cdnv": chan_init(dt),
          "angle": chan_init(dt),
          "kernel": chan_init(dt),
          "kernel_coinc": zi,
          "riesz_lse": lse_init(dt),
          "etf_off": z,
      },
      "rows": {k: jnp.zeros((kpad,), dt) for k in ("cdnv_sum", "cdnv_cnt", "cos_sum")},
  }


def pair_pass(mt, mu_unc, var, valid, g_fro, k_valid, *, block, cdnv_exponent, angle_variant, gnc2_centered,
              coincide_rtol, riesz_s=1.0):
  """Stream over all unordered valid pairs; returns a dict of running stats.

  mt: (K_pad, d) centred means (padded rows zero), mu_unc: (K_pad, d)
  uncentred means (only used when ``gnc2_centered=False``), var: (K_pad,),
  valid: (K_pad,) bool, **True exactly on the first k_valid rows** (the caller sorts the
  valid rows first), g_fro: ||G||_F of G = M~ M~^T, k_valid: K (traced scalar).  The loop
  visits only the ceil(K/B) (ceil(K/B) + 1) / 2 block pairs that hold valid rows (a
  ``fori_loop`` with a traced bound; under ``vmap`` it runs to the largest K of the batch).
  Row sums per class (``rows``): CDNV sum and count, cos sum (the per-class statistics).
  """
  dt = mt.dtype
  kpad, d = mt.shape
  nb = kpad // block
  bi, bj = _block_pairs(nb)
  n2 = jnp.sum(mt * mt, axis=1)
  nrm = jnp.sqrt(n2)
  if gnc2_centered:
    unc = None
  else:
    un = jnp.linalg.norm(mu_unc, axis=1)
    unc = jnp.where((un > 0)[:, None], mu_unc / jnp.where(un > 0, un, 1.0)[:, None], 0.0)
  kf = k_valid.astype(dt)
  etf_off = 1.0 / (kf * jnp.sqrt(kf - 1.0))  # -P_ij / sqrt(K-1) for i != j
  ar = jnp.arange(block, dtype=jnp.int32)

  def sl(x, i):
    return lax.dynamic_slice_in_dim(x, i * block, block, axis=0)

  def addrow(x, i, j, m):
    x = lax.dynamic_update_slice_in_dim(x, sl(x, i) + jnp.sum(m, axis=1), i * block, axis=0)
    return lax.dynamic_update_slice_in_dim(x, sl(x, j) + jnp.sum(m, axis=0), j * block, axis=0)

  def body(step, carry):
    i, j = bi[step], bj[step]
    pm = sl(valid, i)[:, None] & sl(valid, j)[None, :] & ((i * block + ar)[:, None] < (j * block + ar)[None, :])
    t = _pair_terms(
        sl(mt, i), sl(mt, j), sl(n2, i), sl(n2, j), sl(nrm, i), sl(nrm, j), sl(var, i), sl(var, j), pm,
        None if unc is None else sl(unc, i), None if unc is None else sl(unc, j), g_fro, etf_off,
        cdnv_exponent=cdnv_exponent, angle_variant=angle_variant, coincide_rtol=coincide_rtol, riesz_s=riesz_s,
    )
    rows = carry["rows"]
    rows = {
        "cdnv_sum": addrow(rows["cdnv_sum"], i, j, t["s_val"]),
        "cdnv_cnt": addrow(rows["cdnv_cnt"], i, j, t["cvalid"].astype(dt)),
        "cos_sum": addrow(rows["cos_sum"], i, j, jnp.where(pm, t["cos"], 0.0)),
    }
    return {"stats": _merge_stats(carry["stats"], t, pm, dt), "rows": rows}

  m = (k_valid.astype(jnp.int32) + block - 1) // block  # blocks holding valid rows
  return lax.fori_loop(0, jnp.minimum(m * (m + 1) // 2, bi.shape[0]), body, _init_carry(dt, kpad))
