"""Anisotropy of token representations (Godey et al. 2024, Sec. 4.1).

A(H) = 1 / (N^2 - N) * sum_{i != j} cos(h_i, h_j), computed in O(N d) without
the N x N cosine matrix: with unit vectors hhat_i and s = sum_i hhat_i,

    A = (||s||^2 - sum_i ||hhat_i||^2) / (N^2 - N)

(sum_i ||hhat_i||^2 = N up to rounding; subtracting the computed value removes
the diagonal exactly).  The paper does not state the number of sampled token
positions; pass your sample in and report N yourself.  (``docs/metrics.md`` section 2.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._util import acc_dtype, at_least_f32, check_shapes


def anisotropy(h, mask=None):
  """Mean pairwise cosine similarity over distinct pairs of rows of ``h``.

  Zero vectors have no direction: they are *excluded* (as if masked out) and
  N counts only the non-zero, unmasked rows.

  Args:
    h: (N, d) representations of one layer (any float dtype; computed in
      float32, or float64 under x64).
    mask: optional (N,) bool; False rows are ignored (e.g. padding).

  Returns:
    Scalar in [-1/(N-1), 1], float32 (float64 under x64); 1 for N copies of one direction;
    NaN with fewer than 2 usable rows (anisotropy is undefined there).
  """
  check_shapes("anisotropy", h=(h, "N d"), mask=(mask, "N"))
  h = at_least_f32(h).astype(acc_dtype())
  nrm = jnp.linalg.norm(h, axis=-1)
  keep = nrm > 0
  if mask is not None:
    keep = keep & jnp.asarray(mask, bool)
  hh = jnp.where(keep[:, None], h / jnp.where(keep, nrm, 1.0)[:, None], 0.0)
  n = jnp.sum(keep).astype(hh.dtype)
  s = jnp.sum(hh, axis=0)
  diag = jnp.sum(hh * hh)
  denom = n * n - n
  return jnp.where(denom > 0, (jnp.dot(s, s) - diag) / jnp.where(denom > 0, denom, 1.0), jnp.nan)


def anisotropy_by_layer(h, mask=None):
  """:func:`anisotropy` of each layer.

  Args:
    h: (L, N, d) representations, any float dtype.
    mask: optional bool, (N,) for every layer or (L, N).

  Returns:
    (L,) float32 array (float64 under x64).
  """
  check_shapes("anisotropy_by_layer", h=(h, "L N d"), mask=(mask, "N" if mask is None or jnp.ndim(mask) < 2 else "L N"))
  if mask is None:
    return jax.vmap(anisotropy)(h)
  mask = jnp.asarray(mask, bool)
  if mask.ndim == 1:
    return jax.vmap(anisotropy, in_axes=(0, None))(h, mask)
  return jax.vmap(anisotropy)(h, mask)
