r"""The exact rank-r floor of a planted language: the best loss any rank-r head can reach.

For next-token distributions ``P(·|c)`` (C contexts x V tokens) with stationary context
distribution ``π``, the floor at rank r is (nats per token)

    floor(r) = min_{X ∈ R^{C×r}, Y ∈ R^{V×r}}  F(X Yᵀ),
    F(L)     = Σ_c π_c CE(P(·|c), softmax(L_c)) = Σ_c π_c [ lse(L_c) − Σ_w P(w|c) L_cw ].

A bias ``1 bᵀ`` takes one of the r dimensions, as in a bias-free rank-r head. Facts (tested):

* ``F(L) ≥ H = Σ_c π_c H(P(·|c))`` (Gibbs), so a fit that reaches H is a global minimum;
* the row-centred log-probabilities ``M = log P (I − 11ᵀ/V)`` give ``softmax(M_c) = P(·|c)``;
  a planted language of rank k has ``rank M ≤ k + 1``, so ``floor(r) = H`` for r ≥ k + 1;
* ``floor`` is non-increasing in r (pad a rank-r solution with a zero column).

Below rank M the problem has genuine local minima, so each rank keeps the **best of several
starts** and records them all (``FloorResult.starts``, ``spread`` = worst − best):

* ``svd``: the truncated SVD of ``diag(√π) M = U S Wᵀ``: ``X = diag(1/√π) U_r S_r^{1/2}``,
  ``Y = W_r S_r^{1/2}`` (exact for r ≥ rank M);
* ``warm``: the best of the rank below plus N(0, PERTURB²) new columns (zero columns in both
  factors are a saddle);
* ``down`` / ``down-best``: the rank above's solution, row-centred and truncated by the same
  π-weighted SVD (a homotopy down from the exact solution at rank M);
* ``random<j>`` (N(0, RANDOM_SCALE²) entries) and ``wide<j>`` (N(0, WIDE_SCALE²)), drawn
  from ``(seed, r, j)`` and ``(seed, r, 2j + 1)``: they reach other basins.

Once a start reaches H (to ``AT_H``) no further start runs. ``floor_curve`` runs an upward
pass (svd, warm, random, wide) and a downward pass (down) over a ladder of ranks that includes
the rank of M when it lies below the largest requested rank, then a last warm start wherever a
rank is above the rank below. Below rank M the value is the best found: an upper bound.

Optimisation: scipy's L-BFGS in float64 (BLAS on one thread) on ``(diag(√π) X, Y)`` (the
rescaling preconditions contexts of very different weight) with the analytic gradient

    G = ∂F/∂L = diag(π) (softmax(L) − P),   ∂F/∂X = G Y,   ∂F/∂Y = Gᵀ X.

Converged: the tangent-space gradient ``P_T(G) = Q_X Q_Xᵀ G + G Q_Y Q_Yᵀ − Q_X Q_Xᵀ G Q_Y Q_Yᵀ``
(``Q_X, Q_Y`` orthonormal bases of the column spaces of X and Y) has ``‖P_T(G)‖_F ≤ gtol``.
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
N_RANDOM = 4  # random small-scale starts per rank
RANDOM_SCALE = 0.01  # their entries: N(0, RANDOM_SCALE²)
N_WIDE = 2  # random wide starts per rank
WIDE_SCALE = 0.5  # their entries: N(0, WIDE_SCALE²)
AT_H = 1e-12  # F − H below this: the global minimum (Gibbs); no further start is needed
STALL, STALL_ITERS = 1e-10, 50  # a fit stops when F fell by < STALL in STALL_ITERS iterations
PERTURB = 1e-3  # scale of the new columns of a warm (padded) start


@contextlib.contextmanager
def single_thread_blas():
  """Every OpenBLAS loaded in the process (Linux: /proc/self/maps) on one thread inside the
  block, restored after: these fits multiply small matrices, which a multi-threaded BLAS on a
  busy machine runs far slower."""
  try:
    with open("/proc/self/maps") as f:
      paths = {ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln}
  except OSError:
    paths = set()
  handles = []
  for path in sorted(paths):
    lib = ctypes.CDLL(path)
    for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                           ("openblas", "64_"), ("openblas", "")):
      get, set_ = (f"{prefix}_{op}_num_threads{suffix}" for op in ("get", "set"))
      if hasattr(lib, get) and hasattr(lib, set_):
        handles.append((getattr(lib, set_), getattr(lib, get)()))
        break
  for set_, _ in handles:
    set_(1)
  try:
    yield
  finally:
    for set_, n in handles:
      set_(max(int(n), 1))


@dataclasses.dataclass
class Start:
  """One optimiser run: its start's name, the value it reached and its tangent gradient."""

  name: str
  value: float
  grad_norm: float
  n_iter: int


@dataclasses.dataclass
class FloorResult:
  """floor(rank) in nats, the planted entropy H, and the optimiser's convergence record."""

  rank: int
  value: float  # floor(r) = F(X Yᵀ) at the best start
  entropy: float  # H
  grad_norm: float  # ‖P_T(G)‖_F at the best start
  n_iter: int  # L-BFGS iterations, all starts together
  converged: bool
  start: str  # the start that gave the value
  X: np.ndarray = dataclasses.field(repr=False, default=None)
  Y: np.ndarray = dataclasses.field(repr=False, default=None)
  starts: list = dataclasses.field(repr=False, default_factory=list)  # every Start run

  @property
  def gap(self) -> float:
    """floor(r) − H (≥ 0)."""
    return self.value - self.entropy

  @property
  def spread(self) -> float:
    """Worst − best value over the starts (0 with one start)."""
    vals = [s.value for s in self.starts]
    return max(vals) - min(vals) if len(vals) > 1 else 0.0

  def row(self) -> dict:
    return {"rank": self.rank, "floor": self.value, "H": self.entropy, "floor_gap": self.gap,
            "grad_norm": self.grad_norm, "n_iter": self.n_iter, "converged": self.converged,
            "start": self.start, "n_starts": len(self.starts), "spread": self.spread}


def _as_problem(lang_or_probs, weights=None):
  """(P [C,V], π [C] summing to 1) in float64 from a planted language (``probs``,
  ``stationary``) or from probs with ``weights``."""
  if weights is None:
    lang_or_probs, weights = lang_or_probs.probs, lang_or_probs.stationary
  pi = np.asarray(weights, np.float64)
  return np.asarray(lang_or_probs, np.float64), pi / pi.sum()


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


def _weighted_centred(L: np.ndarray, pi: np.ndarray):
  """(√π, diag(√π) L (I − 11ᵀ/V)): the rows of L centred and weighted as the loss weighs them."""
  w = np.sqrt(np.maximum(pi, 1e-12))
  return w, w[:, None] * (L - L.mean(1, keepdims=True))


def _svd_factors(L: np.ndarray, pi: np.ndarray, r: int):
  """(X, Y) of rank r from the truncated SVD of ``_weighted_centred(L)`` (module doc; zero
  columns past its rank)."""
  w, m = _weighted_centred(L, pi)
  u, s, vt = np.linalg.svd(m, full_matrices=False)
  k = min(r, s.size)
  sq = np.sqrt(s[:k])
  X, Y = np.zeros((L.shape[0], r)), np.zeros((L.shape[1], r))
  X[:, :k] = u[:, :k] * sq / w[:, None]
  Y[:, :k] = vt[:k].T * sq
  return X, Y


def svd_start(p: np.ndarray, pi: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
  """The ``svd`` start: exact when r ≥ the rank of the weighted centred log-probs."""
  return _svd_factors(np.log(np.clip(p, 1e-300, None)), pi, r)


def truncate(X: np.ndarray, Y: np.ndarray, pi: np.ndarray, r: int):
  """The rank-r start from a higher-rank solution (``down``): X Yᵀ truncated as ``svd_start``."""
  return _svd_factors(X @ Y.T, pi, r)


def pad(X: np.ndarray, Y: np.ndarray, r: int, seed=0):
  """The rank-r start from a lower-rank solution (``warm``): its columns plus N(0, PERTURB²)
  new ones."""
  rng = np.random.default_rng(seed)
  k = min(X.shape[1], r)
  x = PERTURB * rng.standard_normal((X.shape[0], r))
  y = PERTURB * rng.standard_normal((Y.shape[0], r))
  x[:, :k], y[:, :k] = X[:, :k], Y[:, :k]
  return x, y


class Lbfgs:
  """F(X Yᵀ) for scipy's L-BFGS over z = (diag(√π) X, Y), flattened (module doc)."""

  def __init__(self, p: np.ndarray, pi: np.ndarray, r: int):
    self.p, self.pi, self.r = p, pi, r
    self.sx = 1.0 / np.sqrt(np.maximum(pi, 1e-12))[:, None]
    self.last = {}

  def z(self, X, Y) -> np.ndarray:
    return np.concatenate([(np.asarray(X, np.float64) / self.sx).ravel(),
                           np.asarray(Y, np.float64).ravel()])

  def split(self, z):
    """(X, Y) of z."""
    n = self.p.shape[0] * self.r
    return z[:n].reshape(-1, self.r) * self.sx, z[n:].reshape(-1, self.r)

  def _fun(self, z):
    x, y = self.split(z)
    f, g = objective(x @ y.T, self.p, self.pi)
    self.last.update(z=z, g=g)
    return f, np.concatenate([((g @ y) * self.sx).ravel(), (g.T @ x).ravel()])

  def run(self, z, max_iter: int, stop):
    """scipy's result from z after at most ``max_iter`` iterations; after each, ``stop(F, z,
    G)`` (G at z, or None when the last evaluation was elsewhere) ends the run by returning
    True."""
    def callback(intermediate_result):
      x = intermediate_result.x
      g = self.last["g"] if np.array_equal(self.last["z"], x) else None
      if stop(float(intermediate_result.fun), x, g):
        raise StopIteration

    return minimize(self._fun, z, jac=True, method="L-BFGS-B", callback=callback,
                    options={"maxiter": max_iter, "maxcor": 30, "ftol": 0.0, "gtol": 0.0,
                             "maxls": 50})


def _minimise(p, pi, X, Y, gtol: float, max_iter: int, restarts: int):
  """L-BFGS from (X, Y) until ‖P_T(G)‖_F ≤ gtol and F fell by less than STALL over the last
  STALL_ITERS iterations (a small gradient alone stops early on this flat landscape);
  restarts the memory when it stalls above gtol."""
  opt, hist = Lbfgs(p, pi, X.shape[1]), []

  def stop(f, z, g):
    hist.append(f)
    if len(hist) % 10 or len(hist) <= STALL_ITERS or hist[-STALL_ITERS - 1] - hist[-1] > STALL:
      return False
    return g is not None and tangent_grad_norm(*opt.split(z), g) <= gtol

  z, n_iter = opt.z(X, Y), 0
  for _ in range(restarts + 1):
    x, y = opt.split(z)
    if tangent_grad_norm(x, y, objective(x @ y.T, p, pi)[1]) <= gtol:
      break
    res = opt.run(z, max_iter, stop)
    n_iter += int(res.nit)
    z = res.x
  x, y = opt.split(z)
  f, g = objective(x @ y.T, p, pi)
  return x, y, f, tangent_grad_norm(x, y, g), n_iter


class _Rank:
  """The candidates of one rank: every start's [name, X, Y, F, ‖P_T(G)‖, iterations]."""

  def __init__(self, p, pi, h, r, gtol, max_iter, restarts):
    self.p, self.pi, self.h, self.r = p, pi, h, r
    self.gtol, self.max_iter, self.restarts = gtol, max_iter, restarts
    self.cands: list[list] = []

  @property
  def best(self) -> list:
    return min(self.cands, key=lambda c: c[3])

  def run(self, name: str, X: np.ndarray, Y: np.ndarray) -> list | None:
    """One start (none once the global minimum H is reached)."""
    if self.cands and self.best[3] - self.h <= AT_H:
      return None
    x, y, f, gn, it = _minimise(self.p, self.pi, X, Y, self.gtol, self.max_iter, self.restarts)
    self.cands.append([name, x, y, f, gn, it])
    return self.cands[-1]

  def up(self, lower: tuple | None, n_random: int, seed: int, n_wide: int) -> None:
    """The svd start, the warm start from ``lower`` (X, Y of the rank below) and the random
    starts."""
    C, V = self.p.shape
    self.run("svd", *svd_start(self.p, self.pi, self.r))
    if lower is not None:
      self.run("warm", *pad(*lower, self.r, [seed, self.r]))
    draws = [(f"random{j}", j, RANDOM_SCALE) for j in range(n_random)]
    draws += [(f"wide{j}", 2 * j + 1, WIDE_SCALE) for j in range(n_wide)]
    for name, j, scale in draws:
      rng = np.random.default_rng([seed, self.r, j])
      self.run(name, scale * rng.standard_normal((C, self.r)),
               scale * rng.standard_normal((V, self.r)))

  def result(self) -> FloorResult:
    """The best candidate, with every start's record."""
    name, x, y, f, gn, _ = self.best
    return FloorResult(rank=self.r, value=f, entropy=self.h, grad_norm=gn,
                       n_iter=sum(c[5] for c in self.cands),
                       converged=bool(gn <= self.gtol or f - self.h <= AT_H), start=name,
                       X=x, Y=y, starts=[Start(c[0], c[3], c[4], c[5]) for c in self.cands])


def rank_floor(lang_or_probs, r: int, *, weights=None, gtol: float = DEFAULT_GTOL,
               max_iter: int = 5000, restarts: int = 3, warm: tuple | None = None,
               n_random: int = N_RANDOM, seed: int = 0, n_wide: int = N_WIDE) -> FloorResult:
  """floor(r) for one rank r: the svd, random and wide starts, and the warm start from
  ``warm`` = (X, Y) of a lower rank when given."""
  p, pi = _as_problem(lang_or_probs, weights)
  rk = _Rank(p, pi, entropy(p, pi), int(min(r, *p.shape)), gtol, max_iter, restarts)
  with single_thread_blas():
    rk.up(warm, n_random, seed, n_wide)
  return rk.result()


def _down(ladder: list[_Rank]) -> None:
  """Down the ladder: each rank from the truncation of the rank above, both of the pure
  down chain (started at the top rank's best) and of the rank above's best."""
  chain = ladder[-1].best
  for i in range(len(ladder) - 2, -1, -1):
    rk, above = ladder[i], ladder[i + 1]
    got = rk.run("down", *truncate(*chain[1:3], rk.pi, rk.r))
    if above.best is not chain:
      rk.run("down-best", *truncate(*above.best[1:3], rk.pi, rk.r))
    chain = got if got is not None else rk.best


def floor_curve(lang_or_probs, ranks: Iterable[int], *, weights=None, gtol: float = DEFAULT_GTOL,
                max_iter: int = 5000, restarts: int = 3, require_converged: bool = True,
                n_random: int = N_RANDOM, seed: int = 0,
                n_wide: int = N_WIDE) -> list[FloorResult]:
  """floor(r) for every r in ``ranks`` (ascending; non-increasing by construction), by the
  passes of the module doc. With ``require_converged``, ``RuntimeError`` names a rank whose
  best fit has ‖P_T(G)‖_F > gtol."""
  want = sorted({int(r) for r in ranks})
  p, pi = _as_problem(lang_or_probs, weights)
  h = entropy(p, pi)
  top = _exact_rank(p, pi)
  rungs = sorted(set(want) | ({top} if top < want[-1] else set()))
  ladder = [_Rank(p, pi, h, min(r, *p.shape), gtol, max_iter, restarts) for r in rungs]
  with single_thread_blas():
    for i, rk in enumerate(ladder):
      rk.up(ladder[i - 1].best[1:3] if i else None, n_random, seed, n_wide)
    _down(ladder)
    for i in range(1, len(ladder)):
      if ladder[i].best[3] > ladder[i - 1].best[3]:
        ladder[i].run("warm", *pad(*ladder[i - 1].best[1:3], ladder[i].r, [seed, 1 << 20, i]))
    out = [rk.result() for rk in ladder]
  out = [res for r, res in zip(rungs, out) if r in want]
  for r, res in zip(want, out):
    res.rank = r
    if require_converged and not res.converged:
      raise RuntimeError(f"floor: rank {r} did not converge (tangent gradient norm "
                         f"{res.grad_norm:.3g} > gtol {gtol:.3g} after {res.n_iter} L-BFGS "
                         "iterations); raise max_iter/restarts or loosen gtol")
  return out


def _exact_rank(p: np.ndarray, pi: np.ndarray, rtol: float = 1e-9) -> int:
  """The numerical rank of diag(√π) M (M the row-centred log-probs): floor(r) = H from it on."""
  s = np.linalg.svd(_weighted_centred(np.log(np.clip(p, 1e-300, None)), pi)[1], compute_uv=False)
  return max(1, int(np.sum(s > rtol * s[0]))) if s.size and s[0] > 0 else 1


def knee(ranks: Sequence[int], losses: Sequence[float], h: float, tol: float = 0.05):
  """The smallest rank whose loss is within ``tol`` nats of H, or None."""
  within = [int(r) for r, l in zip(ranks, losses) if math.isfinite(l) and l - h <= tol]
  return min(within) if within else None
