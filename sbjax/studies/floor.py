r"""The exact rank-r floor of a planted language: the best loss any rank-r head can reach.

For a Markov language with next-token distributions ``P(·|c)`` (C contexts x V tokens) and
stationary context distribution ``π``, the floor at rank r is

    floor(r) = min_{X ∈ R^{C×r}, Y ∈ R^{V×r}}  F(X Yᵀ),
    F(L)     = Σ_c π_c CE(P(·|c), softmax(L_c))
             = Σ_c π_c [ lse(L_c) − Σ_w P(w|c) L_cw ]            (nats per token).

There is no separate bias: a bias ``1 bᵀ`` takes one of the r dimensions, exactly as in a
bias-free rank-r head ``logits = A (B h)``. Facts used (and tested):

* ``F(L) ≥ H = Σ_c π_c H(P(·|c))`` (Gibbs), with equality iff ``softmax(L_c) = P(·|c)`` on
  every context with π_c > 0; so ``floor(r) ≥ H`` and ``floor(min(C, V)) = H``. A fit that
  reaches H is therefore a *global* minimum.
* the row-centred log-probabilities ``M = log P (I − 11ᵀ/V)`` give ``softmax(M_c) = P(·|c)``;
  for a ``PlantedLanguage`` of planted rank k, ``rank M ≤ k + 1``, so ``floor(r) = H`` for
  every ``r ≥ k + 1``.
* ``floor`` is non-increasing in r (a rank-r solution padded with a zero column is feasible
  at rank r + 1).

**The problem is not convex in (X, Y) and has genuine local minima below rank k+1** (a
positive-semidefinite Hessian at a point with ‖∇‖ ≈ 1e-10, measured): on the main job's
language (V = 256, k = 8) a single SVD start stops at floor(2) − H = 1.3428 where other
starts reach ≈ 1.29. So ``rank_floor`` keeps the **best of several starts** and records
them all (``FloorResult.starts``, ``spread`` = worst − best):

* ``svd``: the truncated SVD of the π-weighted centred log-probs ``diag(√π) M = U S Wᵀ``,
  ``X = diag(1/√π) U_r S_r^{1/2}``, ``Y = W_r S_r^{1/2}`` (exact for r ≥ rank M);
* ``warm``: the best solution of the next lower rank plus N(0, 1e-3²) new columns (zero
  columns in both factors are a saddle that L-BFGS never leaves); it starts at floor(r − 1)
  and only descends, so the curve is non-increasing;
* ``down``: the best solution of the next higher rank, row-centred and truncated to rank r
  by the π-weighted SVD (a homotopy down from the exact solution at rank M);
* ``random<j>``: ``n_random`` (default 4) small-scale Gaussian starts, N(0, 0.01²) entries
  drawn from ``(seed, r, j)``;
* ``wide<j>``: ``n_wide`` (default 2) wide Gaussian starts, N(0, 0.5²) entries (the scale of a
  first-order fit's init) drawn from ``(seed, r, 2j + 1)``. They reach other basins: on the
  main job's language at r = 3 a wide start reaches floor − H = 0.8009 where svd, warm, down
  and small starts stop at 0.8058 (an independent Adam fit from a wide start reaches
  0.8106); at r = 6 a small start (0.1339) beats every wide one (0.1348), so both kinds run.

Once a start reaches H (to 1e-12) it is the global minimum and no further start runs.
``floor_curve`` runs an upward pass (svd, warm, random) and a downward pass (down) over a
ladder of ranks that includes the exact rank of M when it lies below the largest requested
rank, then a last warm start wherever a rank is above the rank below it. Without a global
guarantee below rank M the value is the best found, an upper bound on the true minimum;
the fast tests (r = 2) and ``benchmarks/floor_vs_adam.py`` (every r ≤ 16) check it against
an independent Adam fit from random starts (measured on the main job's language: at r = 3 a random start outside this set once reached 0.7863 against 0.8058 here).

Optimisation: ``scipy.optimize`` L-BFGS in float64 (numpy, BLAS on one thread) on
``(diag(√π) X, Y)`` (the √π rescaling preconditions contexts of very different weight) with
the analytic gradient

    G = ∂F/∂L = diag(π) (softmax(L) − P),   ∂F/∂X = G Y,   ∂F/∂Y = Gᵀ X.

Convergence criterion (first-order stationarity on the manifold of rank-r matrices,
independent of how L is factored): with ``Q_X, Q_Y`` orthonormal bases of the column spaces
of X and Y, the tangent-space gradient ``P_T(G) = Q_X Q_Xᵀ G + G Q_Y Q_Yᵀ − Q_X Q_Xᵀ G Q_Y Q_Yᵀ``
must satisfy ``‖P_T(G)‖_F ≤ gtol``. Every result records ``grad_norm``, the iterations and
whether it converged; ``floor_curve(..., require_converged=True)`` raises otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import minimize

from sbjax.studies.blas_threads import single_thread_blas

DEFAULT_GTOL = 1e-6
N_RANDOM = 4  # random small-scale starts per rank
RANDOM_SCALE = 0.01  # their entries: N(0, RANDOM_SCALE²)
N_WIDE = 2  # random wide starts per rank
WIDE_SCALE = 0.5  # their entries: N(0, WIDE_SCALE²)
AT_H = 1e-12  # F − H below this: the global minimum (Gibbs); no further start is needed
STALL, STALL_ITERS = 1e-10, 50  # a fit stops when F fell by < STALL in STALL_ITERS iterations
PERTURB = 1e-3  # scale of the new columns of a warm (padded) start


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
  start: str  # the start that gave the value: svd, warm, down or random<j>
  X: np.ndarray = dataclasses.field(repr=False, default=None)
  Y: np.ndarray = dataclasses.field(repr=False, default=None)
  starts: list = dataclasses.field(repr=False, default_factory=list)  # every Start run

  @property
  def gap(self) -> float:
    """floor(r) − H (≥ 0)."""
    return self.value - self.entropy

  @property
  def spread(self) -> float:
    """Worst − best value over the starts (0 with one start): how rugged rank r is."""
    vals = [s.value for s in self.starts]
    return max(vals) - min(vals) if len(vals) > 1 else 0.0

  def row(self) -> dict:
    return {"rank": self.rank, "floor": self.value, "H": self.entropy, "floor_gap": self.gap,
            "grad_norm": self.grad_norm, "n_iter": self.n_iter, "converged": self.converged,
            "start": self.start, "n_starts": len(self.starts), "spread": self.spread}


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


def _minimise(p, pi, X, Y, gtol: float, max_iter: int, restarts: int):
  """L-BFGS from (X, Y) until ‖P_T(G)‖_F ≤ gtol and F fell by less than STALL over the last
  STALL_ITERS iterations (the landscape is flat: a small gradient alone stops ~1e-2 nats
  early), or it stalls; restarts the memory when it stalls above gtol.

  Preconditioning: it optimises X̃ = diag(√π) X, whose Hessian no longer scales with π_c
  (π spans orders of magnitude under a Zipfian bias; unscaled L-BFGS crawls)."""
  C, V = p.shape
  r = X.shape[1]
  sx = 1.0 / np.sqrt(np.maximum(pi, 1e-12))[:, None]
  last = {}

  def split(z):
    return z[:C * r].reshape(C, r) * sx, z[C * r:].reshape(V, r)

  def fun(z):
    x, y = split(z)
    f, g = objective(x @ y.T, p, pi)
    last.update(z=z, g=g)
    return f, np.concatenate([((g @ y) * sx).ravel(), (g.T @ x).ravel()])

  hist = []

  def stop(intermediate_result):
    hist.append(float(intermediate_result.fun))
    if len(hist) % 10 or len(hist) <= STALL_ITERS or hist[-STALL_ITERS - 1] - hist[-1] > STALL:
      return
    if np.array_equal(last["z"], intermediate_result.x):
      x, y = split(last["z"])
      if tangent_grad_norm(x, y, last["g"]) <= gtol:
        raise StopIteration  # stationary to gtol, and the value no longer moves

  z = np.concatenate([(X / sx).ravel(), Y.ravel()])
  n_iter = 0
  for _ in range(restarts + 1):
    x, y = split(z)
    _, g = objective(x @ y.T, p, pi)
    if tangent_grad_norm(x, y, g) <= gtol:
      break
    res = minimize(fun, z, jac=True, method="L-BFGS-B", callback=stop,
                   options={"maxiter": max_iter, "maxcor": 30, "ftol": 0.0, "gtol": 0.0,
                            "maxls": 50})
    n_iter += int(res.nit)
    z = res.x
  x, y = split(z)
  f, g = objective(x @ y.T, p, pi)
  return x, y, f, tangent_grad_norm(x, y, g), n_iter


def truncate(X: np.ndarray, Y: np.ndarray, pi: np.ndarray, r: int):
  """The rank-r start from a higher-rank solution: L = X Yᵀ row-centred (softmax ignores a
  per-row shift), then the truncated SVD of diag(√π) L, split as in ``svd_start``."""
  L = X @ Y.T
  L = L - L.mean(1, keepdims=True)
  w = np.sqrt(np.maximum(pi, 1e-12))
  u, s, vt = np.linalg.svd(w[:, None] * L, full_matrices=False)
  sq = np.sqrt(s[:r])
  return u[:, :r] * sq / w[:, None], vt[:r].T * sq


def pad(X: np.ndarray, Y: np.ndarray, r: int, seed=0):
  """The rank-r start from a lower-rank solution: its columns plus N(0, PERTURB²) new ones
  (zero columns in both X and Y are a saddle: their gradients G Y, Gᵀ X vanish there)."""
  rng = np.random.default_rng(seed)
  k = min(X.shape[1], r)
  x = PERTURB * rng.standard_normal((X.shape[0], r))
  y = PERTURB * rng.standard_normal((Y.shape[0], r))
  x[:, :k], y[:, :k] = X[:, :k], Y[:, :k]
  return x, y


class _Rank:
  """The candidates of one rank: every start's (name, X, Y, F, ‖P_T(G)‖, iterations)."""

  def __init__(self, p, pi, h, r, gtol, max_iter, restarts):
    self.p, self.pi, self.h, self.r = p, pi, h, r
    self.gtol, self.max_iter, self.restarts = gtol, max_iter, restarts
    self.cands: list[list] = []

  @property
  def best(self) -> list:
    return min(self.cands, key=lambda c: c[3])

  def at_h(self) -> bool:
    return bool(self.cands) and self.best[3] - self.h <= AT_H

  def run(self, name: str, X: np.ndarray, Y: np.ndarray) -> list | None:
    """One start (none once the global minimum H is reached)."""
    if self.at_h():
      return None
    x, y, f, gn, it = _minimise(self.p, self.pi, X, Y, self.gtol, self.max_iter, self.restarts)
    self.cands.append([name, x, y, f, gn, it])
    return self.cands[-1]

  def result(self) -> FloorResult:
    """The best candidate, with every start's record."""
    name, x, y, f, gn, _ = self.best
    return FloorResult(rank=self.r, value=f, entropy=self.h, grad_norm=gn,
                       n_iter=sum(c[5] for c in self.cands),
                       converged=bool(gn <= self.gtol or f - self.h <= AT_H), start=name,
                       X=x, Y=y, starts=[Start(c[0], c[3], c[4], c[5]) for c in self.cands])


def _up(rk: _Rank, lower: _Rank | None, n_random: int, seed: int,
        n_wide: int = N_WIDE) -> None:
  """The svd start, the warm start from the rank below and the random starts."""
  C, V = rk.p.shape
  rk.run("svd", *svd_start(rk.p, rk.pi, rk.r))
  if lower is not None:
    rk.run("warm", *pad(*lower.best[1:3], rk.r, [seed, rk.r]))
  draws = [(f"random{j}", j, RANDOM_SCALE) for j in range(n_random)]
  draws += [(f"wide{j}", 2 * j + 1, WIDE_SCALE) for j in range(n_wide)]
  for name, j, scale in draws:
    rng = np.random.default_rng([seed, rk.r, j])
    rk.run(name, scale * rng.standard_normal((C, rk.r)), scale * rng.standard_normal((V, rk.r)))


def rank_floor(lang_or_probs, r: int, *, weights=None, gtol: float = DEFAULT_GTOL,
               max_iter: int = 5000, restarts: int = 3, warm: tuple | None = None,
               down: tuple | None = None, n_random: int = N_RANDOM,
               seed: int = 0, n_wide: int = N_WIDE) -> FloorResult:
  """floor(r) for one rank r: the best of the starts of the module docstring.

  ``warm``/``down``: (X, Y) of a lower/higher rank; random starts: the module docstring."""
  p, pi = _as_problem(lang_or_probs, weights)
  C, V = p.shape
  if not isinstance(r, (int, np.integer)) or r < 1:
    raise ValueError(f"floor: rank must be an integer >= 1, got {r!r}")
  _check_n_random(n_random)
  _check_n_random(n_wide)
  r = int(min(r, C, V))
  rk = _Rank(p, pi, entropy(p, pi), r, gtol, max_iter, restarts)
  with single_thread_blas():
    if down is not None:
      rk.run("down", *truncate(*down, pi, r))
    lower = None
    if warm is not None:
      lower = _Rank(p, pi, rk.h, warm[0].shape[1], gtol, max_iter, restarts)
      lower.cands.append(["given", warm[0], warm[1], np.inf, np.inf, 0])
    _up(rk, lower, n_random, seed, n_wide)
    return rk.result()


def _check_n_random(n_random) -> None:
  if not isinstance(n_random, (int, np.integer)) or n_random < 0:
    raise ValueError(f"floor: n_random must be an integer >= 0, got {n_random!r}")


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
  """floor(r) for every r in ``ranks`` (sorted ascending; non-increasing by construction).

  The ladder is ``ranks`` plus the rank of the π-weighted centred log-probs when it lies
  below max(ranks) (floor = H there: the down chain starts from the exact solution). An
  upward pass (svd, warm from the rank below, ``n_random`` random starts per rank), a
  downward pass (the truncations of the rank above), a last warm start where a rank is
  above the rank below; every fit runs to ``gtol``. Raises
  ``RuntimeError`` naming the rank if a best fit does not reach ``‖P_T(G)‖_F ≤ gtol``
  (with ``require_converged``)."""
  want = sorted({int(r) for r in ranks})
  if not want or want[0] < 1:
    raise ValueError(f"floor: ranks must be integers >= 1, got {want}")
  _check_n_random(n_random)
  p, pi = _as_problem(lang_or_probs, weights)
  h = entropy(p, pi)
  top = _exact_rank(p, pi)
  rungs = sorted(set(want) | ({top} if top < want[-1] else set()))
  ladder = [_Rank(p, pi, h, min(r, *p.shape), gtol, max_iter, restarts) for r in rungs]
  with single_thread_blas():
    for i, rk in enumerate(ladder):
      _up(rk, ladder[i - 1] if i else None, n_random, seed, n_wide)
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
  logp = np.log(np.clip(p, 1e-300, None))
  m = np.sqrt(np.maximum(pi, 1e-12))[:, None] * (logp - logp.mean(1, keepdims=True))
  s = np.linalg.svd(m, compute_uv=False)
  return max(1, int(np.sum(s > rtol * s[0]))) if s.size and s[0] > 0 else 1


def knee(ranks: Sequence[int], losses: Sequence[float], h: float, tol: float = 0.05):
  """The smallest rank whose loss is within ``tol`` nats of H, or None."""
  within = [int(r) for r, l in zip(ranks, losses) if math.isfinite(l) and l - h <= tol]
  return min(within) if within else None
