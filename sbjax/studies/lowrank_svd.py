"""Truncated spectra and W-error(d) curves of large C x V matrices that are never densified.

The matrices of the target-rank experiment (Godey et al. 2024, E6) are a sparse matrix plus
a rank-one term,

    M = S + a b^T            (S: C x V scipy.sparse CSR; a: C-vector; b: V-vector),

which covers every variant built by :func:`variant_matrix` from next-token counts N (row
totals n_c, vocabulary V, smoothing k > 0):

    raw            P = N / n_c                                  S = P,            a = 0
    addk           (N + k) / (n_c + kV)                         S = N/(n_c + kV), a_c = k/(n_c + kV), b = 1
    logp           log((N + k) / (n_c + kV))                    S = log1p(N/k) (on N > 0),
                     = log(k/(n_c + kV)) + log1p(N/k)                              a_c = log(k/(n_c + kV)), b = 1
    logp_centered  logp - row mean (softmax-invariant shift)    S = log1p(N/k),   a_c = -sum_v S[c,v] / V, b = 1

The smoothed matrices are dense (every entry is nonzero), but only S (nnz of N) and two
vectors are stored. ``logp_centered`` removes the per-row constant that softmax ignores:
L_c = L (I - 1 1^T / V) = (L + c 1^T)(I - 1 1^T / V) for every c, so
rank(L_c) = min_c rank(L + c 1^T): the rank that logits producing these log-probabilities
need, i.e. the matrix whose rank a softmax head of dimension d actually bounds.

Spectra. Exact Frobenius norm from the parts:
    ||M||_F^2 = ||S||_F^2 + 2 a^T S b + ||a||^2 ||b||^2.
Two ways to the singular values sigma_1 >= sigma_2 >= ...:

* ``gram``: the exact Gram matrix of the smaller side, formed from the parts
  (V <= C: M^T M = S^T S + u b^T + b u^T + ||a||^2 b b^T with u = S^T a; else
  M M^T = S S^T + w a^T + a w^T + ||b||^2 a a^T with w = S b), min(C,V)^2 float64 numbers,
  and its eigenvalues lambda_i = sigma_i^2 (all of them, clamped at 0);
* ``randomized``: Halko, Martinsson & Tropp (2011), Alg. 4.4: Q = orth(M Omega) with a
  Gaussian V x l test matrix, l = k + oversample, then ``n_iter`` power iterations
  Q <- orth(M orth(M^T Q)), and the singular values of the small l x V matrix Q^T M; only
  products M X and M^T Y are used (cost nnz(S) * l per product, memory (C + V) * l);
  orthonormalisation by shifted CholeskyQR3 (Householder QR as the fallback).

    W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||M||_F     (Godey Sec. 5.1)

``gram`` takes the tail sums of the eigenvalues directly (summed from the small end);
``randomized`` knows only the top k values and uses (||M||_F^2 - sum_{i<=d} sigma_i^2),
with the exact norm, so d is limited to k. ``auto`` uses ``gram`` when
min(C, V) <= ``gram_max_dim`` and ``randomized`` otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
import scipy.sparse as sp

VARIANTS = ("raw", "addk", "logp", "logp_centered")
METHODS = ("auto", "gram", "randomized")


@dataclasses.dataclass(frozen=True)
class SparsePlusRankOne:
  """M = S + a b^T, C x V, held implicitly (see the module docstring)."""

  S: sp.csr_matrix
  a: np.ndarray
  b: np.ndarray

  def __post_init__(self):
    s = sp.csr_matrix(self.S, dtype=np.float64)
    a = np.asarray(self.a, np.float64).reshape(-1)
    b = np.asarray(self.b, np.float64).reshape(-1)
    if a.shape[0] != s.shape[0] or b.shape[0] != s.shape[1]:
      raise ValueError(f"S is {s.shape[0]}x{s.shape[1]} but a has {a.shape[0]} and b "
                       f"{b.shape[0]} entries; need len(a) = rows, len(b) = columns")
    object.__setattr__(self, "S", s)
    object.__setattr__(self, "a", a)
    object.__setattr__(self, "b", b)

  @property
  def shape(self) -> tuple[int, int]:
    return tuple(self.S.shape)

  def matmat(self, x: np.ndarray) -> np.ndarray:
    """M @ x for x of shape V x l."""
    return self.S @ x + np.outer(self.a, self.b @ x)

  def rmatmat(self, y: np.ndarray) -> np.ndarray:
    """M^T @ y for y of shape C x l."""
    return self.S.T @ y + np.outer(self.b, self.a @ y)

  def frobenius_sq(self) -> float:
    """||M||_F^2 = ||S||_F^2 + 2 a^T S b + ||a||^2 ||b||^2, exactly from the parts."""
    s2 = float(np.dot(self.S.data, self.S.data))
    cross = float(self.a @ (self.S @ self.b))
    return s2 + 2.0 * cross + float(self.a @ self.a) * float(self.b @ self.b)

  def gram(self) -> np.ndarray:
    """The exact Gram matrix of the smaller side (min(C,V) squared), float64."""
    c, v = self.shape
    if v <= c:
      g = (self.S.T @ self.S).toarray()
      u = np.asarray(self.S.T @ self.a).reshape(-1)
      g += np.outer(u, self.b) + np.outer(self.b, u) + float(self.a @ self.a) * np.outer(self.b, self.b)
    else:
      g = (self.S @ self.S.T).toarray()
      w = np.asarray(self.S @ self.b).reshape(-1)
      g += np.outer(w, self.a) + np.outer(self.a, w) + float(self.b @ self.b) * np.outer(self.a, self.a)
    return g

  def toarray(self) -> np.ndarray:
    """Dense M (for small matrices only, e.g. tests)."""
    return self.S.toarray() + np.outer(self.a, self.b)


def variant_matrix(counts, variant: str, k: float = 0.1) -> SparsePlusRankOne:
  """The C x V matrix of one variant (module docstring) from a count matrix N (C x V)."""
  if variant not in VARIANTS:
    raise ValueError(f"unknown target-rank variant {variant!r}; known: {', '.join(VARIANTS)}")
  n = sp.csr_matrix(counts, dtype=np.float64)
  n.eliminate_zeros()
  c, v = n.shape
  tot = np.asarray(n.sum(axis=1)).reshape(-1)
  if np.any(tot <= 0):
    raise ValueError("every row (context) needs at least one count")
  ones = np.ones(v)
  if variant == "raw":
    return SparsePlusRankOne(sp.diags(1.0 / tot) @ n, np.zeros(c), ones)
  if not k > 0:
    raise ValueError(f"the smoothing constant k={k!r} must be > 0 for variant {variant!r}")
  den = tot + k * v
  if variant == "addk":
    return SparsePlusRankOne(sp.diags(1.0 / den) @ n, k / den, ones)
  g = n.copy()
  g.data = np.log1p(g.data / k)
  if variant == "logp":
    return SparsePlusRankOne(g, np.log(k / den), ones)
  rowsum = np.asarray(g.sum(axis=1)).reshape(-1)
  return SparsePlusRankOne(g, -rowsum / v, ones)  # logp_centered


def _rinv(r: np.ndarray) -> np.ndarray:
  return scipy.linalg.solve_triangular(r, np.eye(r.shape[0]), lower=False, check_finite=False)


def _orth(y: np.ndarray) -> np.ndarray:
  """An orthonormal basis of range(Y) (tall Y): shifted CholeskyQR3 (Fukaya et al. 2020),
  three Gram matrices and small triangular inverses (much faster than Householder QR on
  tall-skinny Y); Householder QR when Y is numerically rank-deficient."""
  m, n = y.shape
  try:
    g = y.T @ y
    shift = 11.0 * (m * n + n * (n + 1)) * np.finfo(np.float64).eps * float(np.trace(g))
    r = scipy.linalg.cholesky(g + shift * np.eye(n), lower=False, check_finite=False)
    q = y @ _rinv(r)
    for _ in range(2):
      r = scipy.linalg.cholesky(q.T @ q, lower=False, check_finite=False)
      q = q @ _rinv(r)
    if np.all(np.isfinite(q)):
      return q
  except np.linalg.LinAlgError:
    pass
  q, _ = np.linalg.qr(y, mode="reduced")
  return q


def randomized_singular_values(m: SparsePlusRankOne, k: int, *, oversample: int = 20,
                               n_iter: int = 6, seed: int = 0) -> np.ndarray:
  """The top k singular values of M by randomized subspace iteration (module docstring)."""
  c, v = m.shape
  kmax = min(c, v)
  if not 1 <= k <= kmax:
    raise ValueError(f"k={k} singular values requested of a {c}x{v} matrix; need 1 <= k <= {kmax}")
  ell = min(kmax, k + max(int(oversample), 0))
  rng = np.random.default_rng(seed)
  q = _orth(m.matmat(rng.standard_normal((v, ell))))
  for _ in range(int(n_iter)):
    q = _orth(m.matmat(_orth(m.rmatmat(q))))
  bt = m.rmatmat(q)  # V x l = (Q^T M)^T
  s = scipy.linalg.svdvals(bt)
  return np.sort(s)[::-1][:k]


@dataclasses.dataclass(frozen=True)
class WErrorCurve:
  dims: np.ndarray  # the d of each value
  w_error: np.ndarray  # W-error(d)
  sigma: np.ndarray  # the singular values computed (all for gram, the top k for randomized)
  frobenius_sq: float
  method: str  # gram | randomized


def _gram_sigma2(m: SparsePlusRankOne) -> np.ndarray:
  lam = scipy.linalg.eigvalsh(m.gram(), overwrite_a=True, check_finite=False)
  return np.clip(lam[::-1], 0.0, None)  # descending


def w_error_curve(m: SparsePlusRankOne, dims, *, method: str = "auto", gram_max_dim: int = 4096,
                  oversample: int = 20, n_iter: int = 6, seed: int = 0) -> WErrorCurve:
  """W-error(d) for each d of ``dims`` (module docstring). d >= min(C, V) gives 0.

  With ``randomized``, d larger than the computed top k = min(max(dims), min(C,V)) is
  impossible by construction (k is max(dims))."""
  if method not in METHODS:
    raise ValueError(f"method={method!r}; allowed: {', '.join(METHODS)}")
  dims = np.asarray(sorted({int(d) for d in np.atleast_1d(dims)}), np.int64)
  if dims.size == 0 or dims[0] < 0:
    raise ValueError(f"dims={dims.tolist()} must be a non-empty list of integers >= 0")
  c, v = m.shape
  kmax = min(c, v)
  fro2 = m.frobenius_sq()
  if method == "auto":
    method = "gram" if kmax <= gram_max_dim else "randomized"
  if fro2 <= 0:
    return WErrorCurve(dims, np.zeros(dims.size), np.zeros(0), 0.0, method)
  dc = np.minimum(dims, kmax)
  if method == "gram":
    s2 = _gram_sigma2(m)
    tail = np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])  # tail[j] = sum_{i >= j} s2[i]
    werr = np.sqrt(np.clip(tail[dc], 0.0, None) / fro2)
  else:
    k = int(max(1, dc.max()))
    s = randomized_singular_values(m, k, oversample=oversample, n_iter=n_iter, seed=seed)
    s2 = s * s
    head = np.concatenate([[0.0], np.cumsum(s2)])  # head[j] = sum_{i < j} s2[i]
    werr = np.sqrt(np.clip(fro2 - head[dc], 0.0, None) / fro2)
    werr = np.where(dims >= kmax, 0.0, werr)  # a full-rank approximation is exact
  return WErrorCurve(dims, werr, np.sqrt(s2), fro2, method)
