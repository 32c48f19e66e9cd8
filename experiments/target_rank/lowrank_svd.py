"""W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||M||_F (Godey et al. 2024, Sec. 5.1) of large C x V
matrices that are never densified: every variant of a next-token count matrix N (row totals n_c,
smoothing k > 0) is M = S + a 1^T, S sparse (``variant_matrix``):

    raw            N / n_c                    S = N / n_c,                a = 0
    addk           (N + k) / (n_c + kV)       S = N / (n_c + kV),         a_c = k / (n_c + kV)
    logp           log((N + k) / (n_c + kV))  S = log1p(N/k) on N > 0,    a_c = log(k / (n_c + kV))
    logp_centered  logp minus its row mean    S = log1p(N/k),             a_c = -sum_v S[c,v] / V

(the row constant removed: the rank that logits need, softmax ignoring it). ||M||_F exactly
from the parts. sigma: ``gram``, the eigenvalues of the exact Gram matrix of the smaller side;
``randomized``, Halko, Martinsson & Tropp (2011) Alg. 4.4 with ``n_iter`` power iterations
(products M X and M^T Y only), the top k values (W-error from ||M||_F^2 - sum_{i<=d}, d <= k);
``auto``: ``gram`` when min(C, V) <= ``gram_max_dim``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp

VARIANTS = ("raw", "addk", "logp", "logp_centered")


class SparsePlusRankOne(NamedTuple):
  """M = S + a b^T, C x V, held implicitly (S: float64 CSR; a: C-vector; b: V-vector)."""

  S: sp.csr_matrix
  a: np.ndarray
  b: np.ndarray

  def matmat(self, x: np.ndarray) -> np.ndarray:
    """M @ x for x of shape V x l."""
    return self.S @ x + np.outer(self.a, self.b @ x)

  def rmatmat(self, y: np.ndarray) -> np.ndarray:
    """M^T @ y for y of shape C x l."""
    return self.S.T @ y + np.outer(self.b, self.a @ y)

  def frobenius_sq(self) -> float:
    """||M||_F^2 = ||S||_F^2 + 2 a^T S b + ||a||^2 ||b||^2."""
    return (float(np.dot(self.S.data, self.S.data)) + 2.0 * float(self.a @ (self.S @ self.b))
            + float(self.a @ self.a) * float(self.b @ self.b))

  def gram(self) -> np.ndarray:
    """The exact Gram matrix of the smaller side (min(C,V) squared), float64."""
    s, a, b = (self.S, self.a, self.b) if self.S.shape[1] <= self.S.shape[0] else \
        (self.S.T, self.b, self.a)
    g, u = (s.T @ s).toarray(), np.asarray(s.T @ a).reshape(-1)
    g += np.outer(u, b) + np.outer(b, u) + float(a @ a) * np.outer(b, b)
    return g


def variant_matrix(counts, variant: str, k: float = 0.1) -> SparsePlusRankOne:
  """The C x V matrix of one variant (module docstring) from a count matrix N (C x V)."""
  if variant not in VARIANTS or (variant != "raw" and not k > 0):
    raise ValueError(f"target-rank variant {variant!r} with k={k!r}: the variants are "
                     f"{', '.join(VARIANTS)}, and every one but raw needs k > 0")
  n = sp.csr_matrix(counts, dtype=np.float64)
  n.eliminate_zeros()
  c, v = n.shape
  tot = np.asarray(n.sum(axis=1)).reshape(-1)  # > 0: every kept context was seen
  ones, den = np.ones(v), tot + k * v
  if variant == "raw":
    return SparsePlusRankOne(sp.diags(1.0 / tot) @ n, np.zeros(c), ones)
  if variant == "addk":
    return SparsePlusRankOne(sp.diags(1.0 / den) @ n, k / den, ones)
  g = n.copy()
  g.data = np.log1p(g.data / k)
  if variant == "logp":
    return SparsePlusRankOne(g, np.log(k / den), ones)
  return SparsePlusRankOne(g, -np.asarray(g.sum(axis=1)).reshape(-1) / v, ones)


def _rinv(r: np.ndarray) -> np.ndarray:
  return scipy.linalg.solve_triangular(r, np.eye(r.shape[0]), lower=False, check_finite=False)


def _orth(y: np.ndarray) -> np.ndarray:
  """An orthonormal basis of range(Y) (tall Y): shifted CholeskyQR3 (Fukaya et al. 2020),
  much faster than Householder QR on tall-skinny Y, which is the fallback when Y is
  numerically rank-deficient."""
  m, n = y.shape
  try:
    g = y.T @ y
    shift = 11.0 * (m * n + n * (n + 1)) * np.finfo(np.float64).eps * float(np.trace(g))
    q = y @ _rinv(scipy.linalg.cholesky(g + shift * np.eye(n), lower=False, check_finite=False))
    for _ in range(2):
      q = q @ _rinv(scipy.linalg.cholesky(q.T @ q, lower=False, check_finite=False))
    if np.all(np.isfinite(q)):
      return q
  except np.linalg.LinAlgError:
    pass
  return np.linalg.qr(y, mode="reduced")[0]


def randomized_singular_values(m: SparsePlusRankOne, k: int, *, oversample: int = 20,
                               n_iter: int = 6, seed: int = 0) -> np.ndarray:
  """The top k ≤ min(C, V) singular values of M by randomized subspace iteration."""
  c, v = m.S.shape
  ell = min(c, v, k + max(int(oversample), 0))
  q = _orth(m.matmat(np.random.default_rng(seed).standard_normal((v, ell))))
  for _ in range(int(n_iter)):
    q = _orth(m.matmat(_orth(m.rmatmat(q))))
  return np.sort(scipy.linalg.svdvals(m.rmatmat(q)))[::-1][:k]  # sigma((Q^T M)^T)


def w_error_curve(m: SparsePlusRankOne, dims, *, method: str = "auto", gram_max_dim: int = 4096,
                  oversample: int = 20, n_iter: int = 6, seed: int = 0) -> tuple:
  """(the d ≥ 0 of ``dims`` sorted, W-error(d) of each, the method: gram | randomized); d ≥
  min(C, V) gives 0 (module docstring)."""
  dims = np.asarray(sorted({int(d) for d in np.atleast_1d(dims)}), np.int64)
  kmax, fro2 = min(m.S.shape), m.frobenius_sq()
  if method == "auto":
    method = "gram" if kmax <= gram_max_dim else "randomized"
  if fro2 <= 0:
    return dims, np.zeros(dims.size), method
  dc = np.minimum(dims, kmax)
  if method == "gram":
    lam = scipy.linalg.eigvalsh(m.gram(), overwrite_a=True, check_finite=False)
    s2 = np.clip(lam[::-1], 0.0, None)  # descending
    tail = np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])  # tail[j] = sum_{i >= j} s2[i]
    werr = np.sqrt(np.clip(tail[dc], 0.0, None) / fro2)
  else:
    s2 = randomized_singular_values(m, int(max(1, dc.max())), oversample=oversample,
                                    n_iter=n_iter, seed=seed) ** 2
    head = np.concatenate([[0.0], np.cumsum(s2)])  # head[j] = sum_{i < j} s2[i]
    werr = np.where(dims >= kmax, 0.0, np.sqrt(np.clip(fro2 - head[dc], 0.0, None) / fro2))
  return dims, werr, method
