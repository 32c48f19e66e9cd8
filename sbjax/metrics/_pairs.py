"""Blocked streaming over unordered class pairs c < c' (never builds K x K), for
``_collapse_core``. The class rows are padded to nb * B (B = block size), the K valid rows
first; a ``fori_loop`` over the block pairs (I <= J) that hold valid rows keeps only running
statistics, so peak memory is O(K_pad d + B^2): (n, mean, M2) merged by Chan et al.'s rule for
the signed statistics, and a log-domain sum (max, sum exp(l - max)) for the positive,
possibly huge ones (the CDNV, the Riesz energy), so float32 overflows only where the true mean
does.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ._util import moments

_HI = lax.Precision.HIGHEST


def moments_merge(a, b):
  """Chan et al.'s parallel merge of two (n, mean, M2) (:func:`moments`): no cancellation."""
  na, ma, qa = a
  nb, mb, qb = b
  n = na + nb
  safe = jnp.maximum(n, 1)
  delta = mb - ma
  mean = ma + delta * nb / safe
  m2 = qa + qb + jnp.square(delta) * na * nb / safe
  return (n, jnp.where(n > 0, mean, 0.0), m2)


def lse_block(logx, m):
  """(max, sum exp(l - max)) of the logs over the mask: a sum of positive terms kept in log space."""
  mx = jnp.max(jnp.where(m, logx, -jnp.inf))
  base = jnp.where(jnp.isfinite(mx), mx, 0.0)
  return (mx, jnp.sum(jnp.exp(jnp.where(m, logx - base, -jnp.inf))))


def lse_merge(a, b):
  ma, sa = a
  mb, sb = b
  m = jnp.maximum(ma, mb)
  base = jnp.where(jnp.isfinite(m), m, 0.0)
  fa = jnp.where(jnp.isfinite(ma), jnp.exp(ma - base), 0.0)
  fb = jnp.where(jnp.isfinite(mb), jnp.exp(mb - base), 0.0)
  return (m, sa * fa + sb * fb)


def lse_log_mean(st, n):
  """log of the mean (1/n) sum x, kept in log space (never overflows); -inf if empty."""
  m, s1 = st
  base = jnp.where(jnp.isfinite(m), m, 0.0)
  safe_n = jnp.maximum(n, 1)
  return jnp.where(s1 > 0, base + jnp.log(jnp.where(s1 > 0, s1, 1.0)) - jnp.log(safe_n), -jnp.inf)


def _block_pairs(nb):
  """Block pairs I <= J ordered by J, then I: the pairs among the first m blocks are the
  first m (m + 1) / 2 entries, so a pass over K valid leading rows stops there."""
  jj, ii = np.triu_indices(nb)
  ii, jj = jj, ii  # (J, I) row-major = (I, J) column-major
  order = np.lexsort((ii, jj))
  return jnp.asarray(ii[order], jnp.int32), jnp.asarray(jj[order], jnp.int32)


def _block(a, b, na2, nb2, nna, nnb, va, vb, pm, ua, ub, g_fro, etf_off, *, cdnv_exponent, angle_variant,
           coincide_rtol, riesz_s):
  """The statistics of one block pair (B x B pairs, pair mask ``pm``), and its per-pair CDNV,
  CDNV mask and cosine for the per-class row sums. Distances from g = <mu~_c, mu~_c'>:
  ||mu~_c - mu~_c'||^2 = ||mu~_c||^2 + ||mu~_c'||^2 - 2 g; the ETF's off-diagonal residual is
  (g / ||G||_F + 1 / (K sqrt(K - 1)))^2."""
  dt = a.dtype
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
  stats = {
      "cdnv_lse": lse_block(logs, pos),
      "cdnv_n": jnp.sum(cvalid).astype(dt),
      "cdnv_coinc": jnp.sum(pm & coinc).astype(jnp.int32),
      "cdnv_zero": jnp.sum(cvalid & ~pos).astype(jnp.int32),
      "log10_cdnv": moments(logs / np.log(10.0), pos),
      "angle": moments(cos if angle_variant == "cos" else g, pm),
      "kernel": moments(-0.5 * log_ku2, kval),
      "kernel_coinc": jnp.sum(pm & kcoinc).astype(jnp.int32),
      "riesz_lse": lse_block((-0.5 * float(riesz_s)) * log_ku2, kval),
      "etf_off": 2.0 * jnp.sum(jnp.where(pm, jnp.square(g / g_fro + etf_off), 0.0)),
  }
  return stats, (jnp.where(pos, jnp.exp(logs), 0.0), cvalid.astype(dt), jnp.where(pm, cos, 0.0))


_MERGE = {"cdnv_lse": lse_merge, "riesz_lse": lse_merge, "log10_cdnv": moments_merge, "angle": moments_merge,
          "kernel": moments_merge}


def _empty(dt):
  """The running statistics before the first block (the keys of :func:`_block`)."""
  z, zi, lse = jnp.zeros((), dt), jnp.zeros((), jnp.int32), (jnp.array(-jnp.inf, dt), jnp.zeros((), dt))
  return {"cdnv_lse": lse, "cdnv_n": z, "cdnv_coinc": zi, "cdnv_zero": zi, "log10_cdnv": (z, z, z),
          "angle": (z, z, z), "kernel": (z, z, z), "kernel_coinc": zi, "riesz_lse": lse, "etf_off": z}


def pair_pass(mt, mu_unc, var, valid, g_fro, k_valid, *, block, cdnv_exponent, angle_variant, gnc2_centered,
              coincide_rtol, riesz_s=1.0):
  """Stream over all unordered valid pairs: (statistics, rows).

  mt: (K_pad, d) centred means (padded rows zero), mu_unc: (K_pad, d) uncentred means (used
  only when ``gnc2_centered=False``), var: (K_pad,), valid: (K_pad,) bool, **True exactly on
  the first k_valid rows** (the caller sorts the valid rows first), g_fro: ||G||_F of
  G = M~ M~^T, k_valid: K (traced).  The loop visits only the ceil(K/B) (ceil(K/B) + 1) / 2
  block pairs that hold valid rows (under ``vmap``, up to the largest K of the batch).
  ``rows``: per class (K_pad,), the CDNV sum and count and the cos sum over its partners.
  """
  dt = mt.dtype
  kpad, d = mt.shape
  bi, bj = _block_pairs(kpad // block)
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
    stats, terms = _block(
        sl(mt, i), sl(mt, j), sl(n2, i), sl(n2, j), sl(nrm, i), sl(nrm, j), sl(var, i), sl(var, j), pm,
        None if unc is None else sl(unc, i), None if unc is None else sl(unc, j), g_fro, etf_off,
        cdnv_exponent=cdnv_exponent, angle_variant=angle_variant, coincide_rtol=coincide_rtol, riesz_s=riesz_s,
    )
    st, rows = carry
    st = {k: _MERGE.get(k, jnp.add)(st[k], x) for k, x in stats.items()}
    return st, tuple(addrow(r, i, j, m) for r, m in zip(rows, terms))

  m = (k_valid.astype(jnp.int32) + block - 1) // block  # blocks holding valid rows
  init = (_empty(dt), tuple(jnp.zeros((kpad,), dt) for _ in range(3)))
  return lax.fori_loop(0, jnp.minimum(m * (m + 1) // 2, bi.shape[0]), body, init)
