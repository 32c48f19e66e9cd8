"""Anisotropy of token representations (Godey et al. 2024, Sec. 4.1; ``docs/metrics.md``
section 2): A(H) = 1 / (N^2 - N) sum_{i != j} cos(h_i, h_j), in O(N d) without the N x N
matrix, as (||s||^2 - sum_i ||hhat_i||^2) / (N^2 - N) with unit rows hhat_i and
s = sum_i hhat_i (subtracting the computed diagonal, not N, removes it exactly).
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
    mask: optional (N,) bool, the same for every layer.

  Returns:
    (L,) float32 array (float64 under x64).
  """
  check_shapes("anisotropy_by_layer", h=(h, "L N d"), mask=(mask, "N"))
  return jax.vmap(anisotropy, in_axes=(0, None))(h, mask)
