"""Independent float64 numpy references of the metrics, from the papers' formulas (docs/metrics.md)."""

import math

import numpy as np


# ------------------------------------------------------------------------------ spectra
def ref_spectrum(w):
  return np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)


def ref_entropy(s):
  p = np.asarray(s, np.float64) / np.sum(s)
  return -sum(pi * math.log(pi) for pi in p if pi > 0)


def ref_kl(s):
  return math.log(len(s)) - ref_entropy(s)


def ref_erank(s):
  return math.exp(ref_entropy(s))


def ref_w_error(s, d):
  s = np.asarray(s, np.float64)
  return math.sqrt(sum(x * x for x in s[d:])) / math.sqrt(sum(x * x for x in s))


# ------------------------------------------------------------------------------ anisotropy
def ref_anisotropy(h):
  h = np.asarray(h, np.float64)
  keep = [i for i in range(len(h)) if np.linalg.norm(h[i]) > 0]
  tot, cnt = 0.0, 0
  for i in keep:
    for j in keep:
      if i != j:
        tot += h[i] @ h[j] / (np.linalg.norm(h[i]) * np.linalg.norm(h[j]))
        cnt += 1
  return tot / cnt


# ------------------------------------------------------------------------------ CKA
def ref_cka_biased(x, y):
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  n = x.shape[0]
  h = np.eye(n) - np.ones((n, n)) / n
  k, l = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h
  return np.trace(k @ l) / np.sqrt(np.trace(k @ k) * np.trace(l @ l))


def ref_hsic_unbiased(k, l):
  """Song et al. 2012 unbiased HSIC, written from the paper's formula."""
  n = k.shape[0]
  k, l = k.copy(), l.copy()
  np.fill_diagonal(k, 0)
  np.fill_diagonal(l, 0)
  one = np.ones(n)
  t1 = np.trace(k @ l)
  t2 = (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
  t3 = 2.0 / (n - 2) * (one @ k @ l @ one)
  return (t1 + t2 - t3) / (n * (n - 3))


def ref_cka_debiased(x, y):
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  k, l = x @ x.T, y @ y.T  # uncentred: the unbiased HSIC is centring-invariant
  return ref_hsic_unbiased(k, l) / np.sqrt(ref_hsic_unbiased(k, k) * ref_hsic_unbiased(l, l))


# ------------------------------------------------------------------------------ collapse
def ref_stats(feats, labels, v):
  """(class means (V, d), biased variances (V,), counts (V,)) by loops over the tokens."""
  feats = np.asarray(feats, np.float64)
  counts = np.zeros(v, np.int64)
  sums = np.zeros((v, feats.shape[1]))
  for h, y in zip(feats, labels):
    counts[y] += 1
    sums[y] += h
  means = sums / np.maximum(counts, 1)[:, None]
  var = np.zeros(v)
  for h, y in zip(feats, labels):
    var[y] += np.sum((h - means[y]) ** 2)
  return means, var / np.maximum(counts, 1), counts


def ref_from_stats(means, var, counts, w, *, min_count=1, k=2, weighted_mean=False, norm_variant="norm",
                   angle_variant="cos", gnc2_centered=True, ddof=1, riesz_s=1.0):
  """NC1-NC3 from class statistics with full K x K matrices (the analysed classes only)."""
  idx = np.flatnonzero(counts >= min_count)
  kk = len(idx)
  mu, vr, ww, cnt = means[idx], var[idx], np.asarray(w, np.float64)[idx], counts[idx]
  mu_g = (mu * cnt[:, None]).sum(0) / cnt.sum() if weighted_mean else mu.mean(0)
  mt = mu - mu_g
  iu = np.triu_indices(kk, 1)
  dist2 = ((mt[:, None, :] - mt[None, :, :]) ** 2).sum(-1)
  with np.errstate(divide="ignore"):  # the diagonal (unused) divides by 0
    cd = ((vr[:, None] + vr[None, :]) / 2) / dist2**k
  s = cd[iu]
  nrm = np.linalg.norm(mt, axis=1)
  x = nrm if norm_variant == "norm" else nrm**2
  g = mt @ mt.T
  cosm = g / np.outer(nrm, nrm)
  ang = (cosm if angle_variant == "cos" else g)[iu]
  ideal = (np.eye(kk) - np.ones((kk, kk)) / kk) / np.sqrt(kk - 1)
  sw = ww @ mt.T
  u = mt if gnc2_centered else mu
  u = u / np.linalg.norm(u, axis=1, keepdims=True)
  udist = np.linalg.norm(u[:, None, :] - u[None, :, :], axis=-1)[iu]
  ker = np.log(1.0 / udist)
  c3 = (ww * mt).sum(1) / (np.linalg.norm(ww, axis=1) * nrm)
  offd = ~np.eye(kk, dtype=bool)
  return {
      "nc1_cdnv": s.mean(),
      "nc1_log10_mean_cdnv": np.log10(s.mean()),
      "nc1_log10_cdnv": np.log10(s[s > 0]).mean(),
      "nc2_norm_cov": x.std(ddof=ddof) / x.mean(),
      "nc2_log_norm_cov": np.log(nrm).std(ddof=ddof) / np.log(nrm).mean(),
      "nc2_cos_mean": ang.mean(),
      "nc2_cos_std": ang.std(ddof=ddof),
      "etf_error": np.linalg.norm(g / np.linalg.norm(g) - ideal),
      "gnc2_log_kernel_mean": ker.mean(),
      "gnc2_log_kernel_var": ker.var(ddof=ddof),
      "gnc2_riesz_mean": np.mean(udist ** -riesz_s),
      "nc3_cos_mean": c3.mean(),
      "unc3_cos_cov": c3.std(ddof=ddof) / c3.mean(),
      "dual_error": np.linalg.norm(sw / np.linalg.norm(sw) - ideal),
      "n_classes": kk,
      "per_class_cdnv": np.array([cd[i][offd[i]].mean() for i in range(kk)]),
      "per_class_interference": np.array([cosm[i][offd[i]].mean() for i in range(kk)]),
  }


def ref_nc4(val_feats, val_labels, w_rows, mu_rows, w_valid, mu_valid, v, weighted=True):
  """NC4 agreement: argmax <w_c, h> == argmin ||h - mu_c||^2, per token or per class."""
  h = np.asarray(val_feats, np.float64)
  sw = np.where(w_valid[None, :], h @ np.asarray(w_rows, np.float64).T, -np.inf)
  dm = ((h[:, None, :] - np.asarray(mu_rows, np.float64)[None, :, :]) ** 2).sum(-1)
  dm = np.where(mu_valid[None, :], dm, np.inf)
  hit = (sw.argmax(1) == dm.argmin(1)).astype(float)
  if weighted:
    return hit.mean()
  return float(np.mean([hit[val_labels == c].mean() for c in range(v) if np.any(val_labels == c)]))
