"""An independent optimiser for the exact-floor tests: Adam on the factors (X, Y) of the logit
matrix L = X Yᵀ from a random start, written plainly in numpy (nothing from sbjax.studies.floor).
The floor is the minimum over rank-r matrices, so no such fit may end below it."""

import numpy as np


def xent(L, p, pi):
  """Σ_c π_c CE(P_c, softmax(L_c)) written directly."""
  L = L - L.max(1, keepdims=True)
  logq = L - np.log(np.exp(L).sum(1, keepdims=True))
  return float(-(pi * (p * logq).sum(1)).sum())


def adam_fit(p, pi, r, seed=0, steps=3000, lr=0.05, scale=0.5):
  """The value Adam reaches on (X, Y) ∈ R^{C×r} × R^{V×r} from N(0, scale²) entries."""
  C, V = p.shape
  rng = np.random.default_rng(seed)
  x, y = rng.normal(0, scale, (C, r)), rng.normal(0, scale, (V, r))
  mx, vx, my, vy = [np.zeros_like(a) for a in (x, x, y, y)]
  for t in range(1, steps + 1):
    L = x @ y.T
    q = np.exp(L - L.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    g = pi[:, None] * (q - p)
    gx, gy = g @ y, g.T @ x
    for a, gr, m, v in ((x, gx, mx, vx), (y, gy, my, vy)):
      m *= 0.9
      m += 0.1 * gr
      v *= 0.999
      v += 0.001 * gr * gr
      a -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-12)
  return xent(x @ y.T, p, pi)
