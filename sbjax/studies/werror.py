"""W-error curves of a head matrix and the threshold rank r* (Godey et al. 2024, Fig. 8; the
werror_loss and vocab_threshold experiments).

    W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||W||_F
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from sbjax import metrics as M


def w_error_curve(w) -> tuple:
  """(sigma, W-error(d) for d = 0..n) of a V x d head, via sbjax.metrics (SVD)."""
  s = M.singular_values(jnp.asarray(w, jnp.float32), method="svd")
  n = int(s.shape[0])
  we = M.w_error(s, jnp.arange(n + 1))
  return np.asarray(s, np.float64), np.asarray(we, np.float64)


def rank_at(curve, level: float) -> int:
  """The smallest d with W-error(d) <= level."""
  return int(next(d for d, v in enumerate(curve) if v <= level))


def first_within(ranks, losses, limit: float):
  """r* = the smallest rank whose loss is <= ``limit`` (None if there is none)."""
  ok = [r for r, l in sorted(zip(ranks, losses)) if l <= limit]
  return ok[0] if ok else None
