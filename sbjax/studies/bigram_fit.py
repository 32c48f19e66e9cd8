r"""One rank-r fit of an n-gram target, run until its tangent gradient meets ``gtol``.

The problem is ``floor.py``'s: minimise F(X Yᵀ) = Σ_c π_c CE(P(·|c), softmax(X_c Yᵀ)) over
X ∈ R^{C×r}, Y ∈ R^{V×r}, by L-BFGS in float64 on (diag(√π) X, Y) (the same preconditioning,
``floor.objective`` and ``floor.tangent_grad_norm``). What differs from ``floor._minimise``:

* the stop is the gradient alone: the fit ends at the first check (every ``check_every``
  iterations) where ‖P_T(G)‖_F ≤ gtol, G = diag(π)(softmax(X Yᵀ) − P). ``floor`` also waits
  for F to stall to 1e-10 over 50 iterations, which on a C ≈ V ≈ 2048 bigram costs thousands
  of iterations more than the tolerance asks;
* every fit records what it did: ``grad_norm``, ``n_iter``, ``converged`` (= grad_norm ≤
  gtol) and ``drift`` = F(iteration n − DRIFT_WINDOW) − F(n), how much the value still fell
  over its last DRIFT_WINDOW iterations (a value not yet settled shows here even when the
  gradient is small);
* the start is given (``start_for``): a fit at the same rank of another target on the same
  vocabulary (another data fraction), mapped by context; else the nearest rank already fitted
  on the same target, padded (from below) or truncated (from above) as in ``floor.pad`` /
  ``floor.truncate``; else the truncated SVD of the π-weighted centred log-probabilities
  (``floor.svd_start``).

An unconverged fit (``max_iter`` reached first) is an upper bound on floor(r) and says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import minimize

from sbjax.studies import floor as fl
from sbjax.studies.blas_threads import single_thread_blas

DRIFT_WINDOW = 100  # iterations over which ``drift`` is measured


@dataclasses.dataclass
class Fit:
  """floor(r) as reached: value F, tangent gradient, iterations, and the factors."""

  rank: int
  value: float
  grad_norm: float
  n_iter: int
  converged: bool
  drift: float  # F fell by this much over the last DRIFT_WINDOW iterations (nan: fewer ran)
  start: str
  X: np.ndarray = dataclasses.field(repr=False, default=None)
  Y: np.ndarray = dataclasses.field(repr=False, default=None)


def _scale(pi: np.ndarray) -> np.ndarray:
  return 1.0 / np.sqrt(np.maximum(pi, 1e-12))[:, None]


def fit(p, pi, X, Y, *, gtol: float = 1e-5, max_iter: int = 2000, check_every: int = 10,
        start: str = "given") -> Fit:
  """L-BFGS from (X, Y) until ‖P_T(G)‖_F ≤ gtol (checked every ``check_every`` iterations) or
  ``max_iter`` iterations."""
  p, pi = np.asarray(p, np.float64), np.asarray(pi, np.float64)
  if max_iter < 1 or gtol <= 0:
    raise ValueError(f"bigram fit: need max_iter >= 1 and gtol > 0, got {max_iter}, {gtol}")
  C, V = p.shape
  r = X.shape[1]
  sx = _scale(pi)
  last, hist = {}, []

  def split(z):
    return z[:C * r].reshape(C, r) * sx, z[C * r:].reshape(V, r)

  def fun(z):
    x, y = split(z)
    f, g = fl.objective(x @ y.T, p, pi)
    last.update(z=z, g=g)
    return f, np.concatenate([((g @ y) * sx).ravel(), (g.T @ x).ravel()])

  def stop(intermediate_result):
    hist.append(float(intermediate_result.fun))
    if len(hist) % check_every:
      return
    x, y = split(intermediate_result.x)
    g = (last["g"] if np.array_equal(last["z"], intermediate_result.x)
         else fl.objective(x @ y.T, p, pi)[1])
    if fl.tangent_grad_norm(x, y, g) <= gtol:
      raise StopIteration

  z = np.concatenate([(np.asarray(X, np.float64) / sx).ravel(), np.asarray(Y, np.float64).ravel()])
  with single_thread_blas():
    res = minimize(fun, z, jac=True, method="L-BFGS-B", callback=stop,
                   options={"maxiter": max_iter, "maxcor": 30, "ftol": 0.0, "gtol": 0.0,
                            "maxls": 50})
    x, y = split(res.x)
    f, g = fl.objective(x @ y.T, p, pi)
    gn = fl.tangent_grad_norm(x, y, g)
  drift = hist[-DRIFT_WINDOW - 1] - hist[-1] if len(hist) > DRIFT_WINDOW else float("nan")
  return Fit(rank=r, value=f, grad_norm=gn, n_iter=len(hist), converged=bool(gn <= gtol),
             drift=float(drift), start=start, X=x, Y=y)


def map_contexts(X: np.ndarray, from_ctx: np.ndarray, to_ctx: np.ndarray) -> np.ndarray:
  """The rows of X (one per context of ``from_ctx`` [C, n]) moved to the contexts ``to_ctx``;
  a context ``from_ctx`` lacks gets a zero row (a uniform prediction)."""
  where = {tuple(c): i for i, c in enumerate(np.asarray(from_ctx).tolist())}
  out = np.zeros((len(to_ctx), X.shape[1]))
  for j, c in enumerate(np.asarray(to_ctx).tolist()):
    i = where.get(tuple(c))
    if i is not None:
      out[j] = X[i]
  return out


def start_for(p, pi, r: int, fits: dict, prior: Fit | None = None, seed: int = 0):
  """(name, X, Y): the start of rank r: ``prior`` (a fit at rank r of another target, e.g.
  another data fraction, already mapped to this target's contexts) when given; else the
  nearest rank in ``fits`` (rank -> Fit, same target), padded from below or truncated from
  above (ties: from below); else the svd start."""
  if prior is not None:
    return "prior", prior.X, prior.Y
  if fits:
    near = min(fits, key=lambda k: (abs(k - r), k > r))
    f = fits[near]
    if near < r:
      return f"pad{near}", *fl.pad(f.X, f.Y, r, [seed, r])
    if near > r:
      return f"truncate{near}", *fl.truncate(f.X, f.Y, pi, r)
    return "refit", f.X, f.Y
  return "svd", *fl.svd_start(p, pi, r)
