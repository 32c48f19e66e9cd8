r"""One rank-r fit of an n-gram target, run until its tangent gradient meets ``gtol``.

The problem, parametrisation and convergence test are ``floor.py``'s (``floor.Lbfgs``,
``floor.tangent_grad_norm``); what differs from ``floor.rank_floor``:

* the stop is the gradient alone: the first check (every CHECK_EVERY iterations) where
  ‖P_T(G)‖_F ≤ gtol (``floor`` also waits for F to stall, which on a large bigram costs
  thousands of iterations more than the tolerance asks);
* one start, given (``start_for``), and a record of the fit: ``grad_norm``, ``n_iter``,
  ``converged`` and ``drift`` = F(iteration n − DRIFT_WINDOW) − F(n), how much the value still
  fell over its last DRIFT_WINDOW iterations.

An unconverged fit (``max_iter`` reached first) is an upper bound on floor(r).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sbjax.studies import floor as fl

DRIFT_WINDOW = 100  # iterations over which ``drift`` is measured
CHECK_EVERY = 10  # iterations between two checks of the tangent gradient


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


def fit(p, pi, X, Y, *, gtol: float = 1e-5, max_iter: int = 2000, start: str = "given") -> Fit:
  """L-BFGS from (X, Y) until ‖P_T(G)‖_F ≤ gtol (checked every CHECK_EVERY iterations) or
  ``max_iter`` iterations."""
  p, pi = np.asarray(p, np.float64), np.asarray(pi, np.float64)
  opt, hist = fl.Lbfgs(p, pi, X.shape[1]), []

  def stop(f, z, g):
    hist.append(f)
    if len(hist) % CHECK_EVERY:
      return False
    x, y = opt.split(z)
    return fl.tangent_grad_norm(x, y, fl.objective(x @ y.T, p, pi)[1] if g is None else g) <= gtol

  with fl.single_thread_blas():
    x, y = opt.split(opt.run(opt.z(X, Y), max_iter, stop).x)
    f, g = fl.objective(x @ y.T, p, pi)
    gn = fl.tangent_grad_norm(x, y, g)
  drift = hist[-DRIFT_WINDOW - 1] - hist[-1] if len(hist) > DRIFT_WINDOW else float("nan")
  return Fit(rank=X.shape[1], value=f, grad_norm=gn, n_iter=len(hist),
             converged=bool(gn <= gtol), drift=float(drift), start=start, X=x, Y=y)


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
