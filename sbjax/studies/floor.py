r"""The exact rank-r floor of a planted language: the best loss any rank-r head can reach.

For a Markov language with next-token distributions ``P(·|c)`` (C contexts x V tokens) and
stationary context distribution ``π``, the floor at rank r is

    floor(r) = min_{X ∈ R^{C×r}, Y ∈ R^{V×r}}  F(X Yᵀ),
    F(L)     = Σ_c π_c CE(P(·|c), softmax(L_c))
             = Σ_c π_c [ lse(L_c) − Σ_w P(w|c) L_cw ]            (nats per token).

There is no separate bias: a bias ``1 bᵀ`` takes one of the r dimensions, exactly as in a
bias-free rank-r head ``logits = A (B h)``. Facts used (and tested):

* ``F(L) ≥ H = Σ_c π_c H(P(·|c))`` (Gibbs), with equality iff ``softmax(L_c) = P(·|c)`` on
  every context with π_c > 0; so ``floor(r) ≥ H`` and ``floor(min(C, V)) = H``.
* the row-centred log-probabilities ``M = log P (I − 11ᵀ/V)`` give ``softmax(M_c) = P(·|c)``;
  for a ``PlantedLanguage`` of planted rank k, ``rank M ≤ k + 1``, so ``floor(r) = H`` for
  every ``r ≥ k + 1``.
* ``floor`` is non-increasing in r (a rank-r solution padded with a zero column is feasible
  at rank r + 1). The sweep enforces it by warm-starting rank r from the best solution of the
  previous rank, besides a truncated-SVD start, and keeping the better of the two.

Optimisation: ``scipy.optimize`` L-BFGS in float64 (numpy, BLAS on one thread) on
``(diag(√π) X, Y)`` (the √π rescaling preconditions contexts of very different weight) with
the analytic gradient

    G = ∂F/∂L = diag(π) (softmax(L) − P),   ∂F/∂X = G Y,   ∂F/∂Y = Gᵀ X.

Starts: the truncated SVD of the π-weighted centred log-probs ``diag(√π) M = U S Wᵀ``,
``X = diag(1/√π) U_r S_r^{1/2}``, ``Y = W_r S_r^{1/2}`` (exact for r ≥ rank M).

Convergence criterion (first-order stationarity on the manifold of rank-r matrices,
independent of how L is factored): with ``Q_X, Q_Y`` orthonormal bases of the column spaces
of X and Y, the tangent-space gradient ``P_T(G) = Q_X Q_Xᵀ G + G Q_Y Q_Yᵀ − Q_X Q_Xᵀ G Q_Y Q_Yᵀ``
must satisfy ``‖P_T(G)‖_F ≤ gtol``. Every result records ``grad_norm``, the iterations and
whether it converged; ``floor_curve(..., require_converged=True)`` raises otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import minimize

DEFAULT_GTOL = 1e-6


@dataclasses.dataclass
class FloorResult:
  """floor(rank) in nats, the planted entropy H, and the optimiser's convergence record."""

  rank: int
  value: float  # floor(r) = F(X Yᵀ) at the optimum
  entropy: float  # H
  grad_norm: float  # ‖P_T(G)‖_F at the optimum
  n_iter: int  # L-BFGS iterations, all restarts together
  converged: bool
  start: str  # "svd" or "warm": which start gave the value
  X: np.ndarray = dataclasses.field(repr=False, default=None)
  Y: np.ndarray = dataclasses.field(repr=False, default=None)

  @property
  def gap(self) -> float:
    """floor(r) − H (≥ 0)."""
    return self.value - self.entropy

  def row(self) -> dict:
    return {"rank": self.rank, "floor": self.value, "H": self.entropy, "floor_gap": self.gap,
            "grad_norm": self.grad_norm, "n_iter": self.n_iter, "converged": self.converged,
            "start": self.start}


def _as_problem(lang_or_probs, weights=None):
  """(P [C,V], π [C]) in float64 from a planted language or plain arrays."""
  if hasattr(lang_or_probs, "probs") and hasattr(lang_or_probs, "stationary"):
    p, pi = lang_or_probs.probs, lang_or_probs.stationary if weights is None else weights
  else:
    p = lang_or_probs
    if weights is None:
      raise ValueError("floor: pass a planted language, or probs [C, V] together with weights [C]")
    pi = weights
  p = np.asarray(p, np.float64)
  pi = np.asarray(pi, np.float64)
  if p.ndim != 2 or pi.shape != (p.shape[0],):
    raise ValueError(f"floor: probs must be [C, V] and weights [C]; got {p.shape} and {pi.shape}")
  if np.any(p < 0) or not np.allclose(p.sum(1), 1.0, atol=1e-9):
    raise ValueError("floor: every row of probs must be a probability distribution")
  if np.any(pi < 0) or pi.sum() <= 0:
    raise ValueError("floor: weights must be non-negative with a positive sum")
  return p, pi / pi.sum()


def entropy(p: np.ndarray, pi: np.ndarray) -> float:
  """H = −Σ_c π_c Σ_w P(w|c) log P(w|c)."""
  plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
  return float(-(pi @ plogp.sum(1)))


def objective(L: np.ndarray, p: np.ndarray, pi: np.ndarray) -> tuple[float, np.ndarray]:
  """F(L) = Σ_c π_c [lse(L_c) − Σ_w P_cw L_cw] and G = diag(π)(softmax(L) − P)."""
  m = L.max(1, keepdims=True)
  e = np.exp(L - m)
  z = e.sum(1, keepdims=True)
  lse = (m + np.log(z))[:, 0]
  f = float(pi @ (lse - np.einsum("cv,cv->c", p, L)))
  g = pi[:, None] * (e / z - p)
  return f, g


def tangent_grad_norm(X: np.ndarray, Y: np.ndarray, g: np.ndarray) -> float:
  """‖P_T(G)‖_F: the gradient projected on the tangent space of rank-r matrices at X Yᵀ."""
  qx = np.linalg.qr(X)[0] if X.size else X
  qy = np.linalg.qr(Y)[0] if Y.size else Y
  a = qx @ (qx.T @ g)
  b = (g @ qy) @ qy.T
  c = qx @ ((qx.T @ g @ qy) @ qy.T)
  return float(np.linalg.norm(a + b - c))


def svd_start(p: np.ndarray, pi: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
  """Truncated SVD of the π-weighted, row-centred log-probs (exact when r ≥ its rank)."""
  logp = np.log(np.clip(p, 1e-300, None))
  m = logp - logp.mean(1, keepdims=True)
  w = np.sqrt(np.maximum(pi, 1e-12))
  u, s, vt = np.linalg.svd(w[:, None] * m, full_matrices=False)
  r_eff = min(r, s.size)
  sq = np.sqrt(s[:r_eff])
  X = np.zeros((p.shape[0], r))
  Y = np.zeros((p.shape[1], r))
  X[:, :r_eff] = u[:, :r_eff] * sq / w[:, None]
  Y[:, :r_eff] = vt[:r_eff].T * sq
  return X, Y


_BLAS_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                 ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                 ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                 ("openblas_get_num_threads", "openblas_set_num_threads"))


def _openblas_handles() -> list:
  """(get, set) thread-count functions of every OpenBLAS loaded in this process (Linux)."""
  out, seen = [], set()
  try:
    maps = open("/proc/self/maps").read().split("\n")
  except OSError:
    return out
  for line in maps:
    path = line.split()[-1] if line.strip() else ""
    if "openblas" not in path.lower() or not path.endswith(".so") and ".so." not in path:
      continue
    if path in seen:
      continue
    seen.add(path)
    try:
      lib = ctypes.CDLL(path)
    except OSError:
      continue
    for get, set_ in _BLAS_SYMBOLS:
      if hasattr(lib, get) and hasattr(lib, set_):
        out.append((getattr(lib, get), getattr(lib, set_)))
        break
  return out


@contextlib.contextmanager
def single_thread_blas():
  """Runs numpy's BLAS on one thread (restored after). These fits multiply small matrices;
  a multi-threaded OpenBLAS on a busy 2-core machine is ~100x slower on them."""
  handles = _openblas_handles()
  old = [get() for get, _ in handles]
  for _, set_ in handles:
    set_(1)
  try:
    yield
  finally:
    for (_, set_), n in zip(handles, old):
      set_(max(int(n), 1))


def _minimise(p, pi, X, Y, gtol: float, max_iter: int, restarts: int):
  """L-BFGS from (X, Y); restarts the memory when it stalls above gtol.

  Preconditioning: it optimises X̃ = diag(√π) X, whose Hessian no longer scales with π_c
  (π spans orders of magnitude under a Zipfian bias; unscaled L-BFGS crawls)."""
  C, V = p.shape
  r = X.shape[1]
  sx = 1.0 / np.sqrt(np.maximum(pi, 1e-12))[:, None]

  def split(z):
    return z[:C * r].reshape(C, r) * sx, z[C * r:].reshape(V, r)

  def fun(z):
    x, y = split(z)
    f, g = objective(x @ y.T, p, pi)
    return f, np.concatenate([((g @ y) * sx).ravel(), (g.T @ x).ravel()])

  z = np.concatenate([(X / sx).ravel(), Y.ravel()])
  n_iter = 0
  for _ in range(restarts + 1):
    x, y = split(z)
    _, g = objective(x @ y.T, p, pi)
    if tangent_grad_norm(x, y, g) <= gtol:
      break
    res = minimize(fun, z, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "maxcor": 30, "ftol": 0.0, "gtol": 0.0,
                            "maxls": 50})
    n_iter += int(res.nit)
    z = res.x
  x, y = split(z)
  f, g = objective(x @ y.T, p, pi)
  return x, y, f, tangent_grad_norm(x, y, g), n_iter


def rank_floor(lang_or_probs, r: int, *, weights=None, gtol: float = DEFAULT_GTOL,
               max_iter: int = 5000, restarts: int = 3, warm: tuple | None = None) -> FloorResult:
  """floor(r) for one rank r (see the module docstring). ``warm``: (X, Y) of a lower rank."""
  p, pi = _as_problem(lang_or_probs, weights)
  C, V = p.shape
  if not isinstance(r, (int, np.integer)) or r < 1:
    raise ValueError(f"floor: rank must be an integer >= 1, got {r!r}")
  r = int(min(r, C, V))
  h = entropy(p, pi)
  starts = [("svd",) + svd_start(p, pi, r)]
  if warm is not None:
    wx, wy = warm
    k = min(wx.shape[1], r)
    X, Y = np.zeros((C, r)), np.zeros((V, r))
    X[:, :k], Y[:, :k] = wx[:, :k], wy[:, :k]
    starts.append(("warm", X, Y))
  with single_thread_blas():
    best, total_iter = _best_of(starts, p, pi, gtol, max_iter, restarts)
  x, y, f, gn, name = best
  return FloorResult(rank=r, value=f, entropy=h, grad_norm=gn, n_iter=total_iter,
                     converged=bool(gn <= gtol or f - h <= 1e-12), start=name, X=x, Y=y)


def _best_of(starts, p, pi, gtol, max_iter, restarts):
  best, total_iter = None, 0
  for name, X, Y in starts:
    if name == "warm" and best[3] <= gtol and best[2] <= objective(X @ Y.T, p, pi)[0]:
      break  # the SVD start converged at or below the warm start's value already
    x, y, f, gn, it = _minimise(p, pi, X, Y, gtol, max_iter, restarts)
    total_iter += it
    if best is None or f < best[2] - 1e-13:
      best = (x, y, f, gn, name)
  return best, total_iter


def floor_curve(lang_or_probs, ranks: Iterable[int], *, weights=None, gtol: float = DEFAULT_GTOL,
                max_iter: int = 5000, restarts: int = 3,
                require_converged: bool = True) -> list[FloorResult]:
  """floor(r) for every r in ``ranks`` (sorted ascending; non-increasing by construction).

  Raises ``RuntimeError`` naming the rank if any fit does not reach ``‖P_T(G)‖_F ≤ gtol``
  (with ``require_converged``)."""
  ranks = sorted({int(r) for r in ranks})
  if not ranks or ranks[0] < 1:
    raise ValueError(f"floor: ranks must be integers >= 1, got {ranks}")
  p, pi = _as_problem(lang_or_probs, weights)
  out: list[FloorResult] = []
  warm = None
  for r in ranks:
    res = rank_floor(p, r, weights=pi, gtol=gtol, max_iter=max_iter, restarts=restarts, warm=warm)
    res.rank = r
    if require_converged and not res.converged:
      raise RuntimeError(f"floor: rank {r} did not converge (tangent gradient norm "
                         f"{res.grad_norm:.3g} > gtol {gtol:.3g} after {res.n_iter} L-BFGS "
                         "iterations); raise max_iter/restarts or loosen gtol")
    out.append(res)
    warm = (res.X, res.Y)
  return out


def knee(ranks: Sequence[int], losses: Sequence[float], h: float, tol: float = 0.05):
  """The smallest rank whose loss is within ``tol`` nats of H, or None."""
  within = [int(r) for r, l in zip(ranks, losses) if math.isfinite(l) and l - h <= tol]
  return min(within) if within else None
