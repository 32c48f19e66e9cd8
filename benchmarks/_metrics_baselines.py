"""Plain baselines for benchmarks/metrics_bench.py (not part of sbjax).

* numpy SVD loop for head spectra;
* a plain torch float64 neural-collapse pipeline following the authors'
  `neural-collapse` library: one-hot matmul accumulation of class sums,
  a full tiled K x K grid for the pair statistics, full K x K structure
  matrices for the ETF / duality errors;
* Kornblith et al.'s numpy feature-space linear CKA in a loop.
"""

from __future__ import annotations

import math

import numpy as np


def numpy_svd_loop(heads):
  return [np.linalg.svd(h, compute_uv=False) for h in heads]


def numpy_cka(x, y):
  x = x - x.mean(0, keepdims=True)
  y = y - y.mean(0, keepdims=True)
  num = np.linalg.norm(x.T @ y) ** 2
  return num / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))


class TorchCollapse:
  """Authors'-library-style accumulation in float64 with one-hot matmuls."""

  def __init__(self, k, d, onehot_chunk=4096):
    import torch

    self.t = torch
    self.k, self.d = k, d
    self.sums = torch.zeros(k, d, dtype=torch.float64)
    self.counts = torch.zeros(k, dtype=torch.float64)
    self.sq = torch.zeros(k, dtype=torch.float64)
    self.hits = 0.0
    self.nval = 0.0
    self.onehot_chunk = onehot_chunk

  def _onehot(self, y):
    return self.t.nn.functional.one_hot(y, self.k).to(self.t.float64)

  def mean_update(self, x, y):
    t = self.t
    x = t.from_numpy(x).to(t.float64)
    y = t.from_numpy(y).long()
    for s in range(0, x.shape[0], self.onehot_chunk):
      oh = self._onehot(y[s : s + self.onehot_chunk])
      self.sums += oh.T @ x[s : s + self.onehot_chunk]
      self.counts += oh.sum(0)

  def finish_means(self):
    self.means = self.sums / self.counts.clamp(min=1)[:, None]

  def var_update(self, x, y):
    t = self.t
    x = t.from_numpy(x).to(t.float64)
    y = t.from_numpy(y).long()
    dev = ((x - self.means[y]) ** 2).sum(1)
    for s in range(0, x.shape[0], self.onehot_chunk):
      oh = self._onehot(y[s : s + self.onehot_chunk])
      self.sq += oh.T @ dev[s : s + self.onehot_chunk]

  def nc4_update(self, x, w, chunk=4096):
    t = self.t
    x = t.from_numpy(x).to(t.float64)
    w = t.from_numpy(w).to(t.float64)
    for s in range(0, x.shape[0], chunk):
      h = x[s : s + chunk]
      lin = (h @ w.T).argmax(1)
      ncc = t.cdist(h, self.means).argmin(1)
      self.hits += float((lin == ncc).sum())
      self.nval += h.shape[0]

  def metrics(self, w, tile=1024, cdnv_exponent=2, ddof=1):
    t = self.t
    w = t.from_numpy(w).to(t.float64)
    var = self.sq / self.counts.clamp(min=1)
    m = self.means
    k = m.shape[0]
    mg = m.mean(0)
    mt = m - mg
    nrm = mt.norm(dim=1)
    u = mt / nrm[:, None]
    s_sum = s_n = 0.0
    l10_sum = l10_sq = 0.0
    c_sum = c_sq = 0.0
    k_sum = k_sq = 0.0
    for i in range(0, k, tile):
      for j in range(0, k, tile):  # full K x K grid of tiles, as in the authors' kernels
        mi, mj = mt[i : i + tile], mt[j : j + tile]
        vs = (var[i : i + tile, None] + var[None, j : j + tile]) / 2
        d2 = (((mi[:, None, :] - mj[None, :, :]) ** 2).sum(-1) if tile <= 256
              else t.cdist(mi, mj) ** 2)
        ii = t.arange(i, min(i + tile, k))[:, None]
        jj = t.arange(j, min(j + tile, k))[None, :]
        off = ii != jj
        s = vs / d2**cdnv_exponent
        s = s[off]
        s_sum += float(s.sum())
        s_n += s.numel()
        l10 = t.log10(s)
        l10_sum += float(l10.sum())
        l10_sq += float((l10**2).sum())
        cos = (u[i : i + tile] @ u[j : j + tile].T)[off]
        c_sum += float(cos.sum())
        c_sq += float((cos**2).sum())
        ker = -0.5 * t.log((2 - 2 * cos).clamp(min=0))
        k_sum += float(ker.sum())
        k_sq += float((ker**2).sum())

    def mstd(sm, sq, n):
      mean = sm / n
      return mean, math.sqrt(max(sq / n - mean * mean, 0.0) * n / (n - ddof))

    out = {"nc1_cdnv": s_sum / s_n}
    out["nc1_log10_cdnv"], _ = mstd(l10_sum, l10_sq, s_n)
    out["nc2_cos_mean"], out["nc2_cos_std"] = mstd(c_sum, c_sq, s_n)
    out["gnc2_log_kernel_mean"], kstd = mstd(k_sum, k_sq, s_n)
    out["gnc2_log_kernel_var"] = kstd**2
    out["nc2_norm_cov"] = float(nrm.std() / nrm.mean())
    ideal = (t.eye(k, dtype=t.float64) - 1.0 / k) / math.sqrt(k - 1)
    g = mt @ mt.T  # full K x K, as the authors' _structure_error
    out["etf_error"] = float(t.linalg.matrix_norm(g / t.linalg.matrix_norm(g) - ideal))
    del g
    sw = w @ mt.T
    out["dual_error"] = float(t.linalg.matrix_norm(sw / t.linalg.matrix_norm(sw) - ideal))
    del sw
    c3 = (w * mt).sum(1) / (w.norm(dim=1) * nrm)
    out["nc3_cos_mean"] = float(c3.mean())
    out["unc3_cos_cov"] = float(c3.std() / c3.mean())
    out["nc4_agreement"] = self.hits / max(self.nval, 1)
    return out
