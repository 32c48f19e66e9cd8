"""Singular values of LM heads (Godey et al. 2024; Diehl Martinez et al. 2024): the Gram route,
its float32 noise floor, the vocabulary centring (``docs/metrics.md`` section 1).

The eigenvalue kernel is one primitive lowered per platform (``sbjax.per_platform``), made on
its first call (importing this module registers nothing with JAX); its derivative rule is
d lambda_i = q_i^T dG q_i, with the eigenvectors of ``jnp.linalg.eigh`` computed only when
differentiating (a value floored to 0 by ``method="auto"`` gets a zero gradient).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import eigh_tridiagonal

from sbjax.per_platform import per_platform_op

from ._util import at_least_f32, check_shapes, x64_enabled

_METHODS = ("auto", "gram", "gram_refine", "gram64", "svd")
_HI = lax.Precision.HIGHEST


def _eigvalsh_cpu(g):
  """CPU: LAPACK ``sytrd`` to tridiagonal form, then bisection (batch axes allowed); measured
  ~2.5x faster than ``eigvalsh`` (which computes eigenvectors and drops them) at d = 512, with
  the same accuracy."""
  _, diag, off, _ = lax.linalg.tridiagonal(g, lower=True)
  eig = lambda d, e: jnp.sort(eigh_tridiagonal(d, e, eigvals_only=True))  # noqa: E731
  for _ in range(g.ndim - 2):
    eig = jax.vmap(eig)
  return eig(diag, off)


@functools.cache
def _eigvalsh_op():
  """The primitive (made and registered with JAX on first use): tridiagonal has no TPU
  lowering, so it cannot sit in a lax.platform_dependent branch of a (cpu, cuda, tpu) export."""
  return per_platform_op("sbjax_spectrum_eigvalsh", jnp.linalg.eigvalsh, cpu=_eigvalsh_cpu)


@jax.custom_jvp
def _eigvalsh(g):
  """Ascending eigenvalues of a symmetric matrix, without eigenvectors (chosen per platform
  when the program is compiled, so one export serves cpu, cuda and tpu)."""
  return _eigvalsh_op()(g)


@_eigvalsh.defjvp
def _eigvalsh_jvp(primals, tangents):
  """d lambda_i = q_i^T dG q_i (first-order perturbation of a symmetric matrix's eigenvalues)."""
  (g,), (dg,) = primals, tangents
  _, q = jnp.linalg.eigh(g)
  return _eigvalsh(g), jnp.einsum("...ji,...jk,...ki->...i", q, dg, q, precision=_HI)


def _gram(w):
  return jnp.matmul(w.T, w, precision=_HI)


def singular_values(w, method: str = "auto"):
  """Singular values of a 2-D matrix, descending, length min(V, d).

  For a tall V x d matrix sigma_i = sqrt(lambda_i(W^T W)): O(V d^2) at matmul speed instead of
  an SVD (a wide matrix is transposed first). Eigenvalues are clamped at 0 before the square
  root, so a rank-deficient input gives exact zeros, never NaN. Gradients flow through every
  method.

  Args:
    w: (V, d) array, any float dtype (bf16/f16 are upcast to float32).
    method:
      * ``"auto"`` (default): ``"gram64"`` under x64, otherwise ``"gram"`` in float32 with a
        noise floor: lambda_i <= 16 eps lambda_max (f32 rounding noise is ~1.5 eps lambda_max)
        is set to 0, so sigma_i below ~1.4e-3 sigma_1 is reported as 0 and a rank-deficient
        head is exact (rank 1 -> KL = log n).
      * ``"gram"``: the Gram in the input precision (>= float32): top values to ~1e-6
        relative; in float32 sigma_i below ~3e-4 sigma_1 is noise (use "gram64" or "svd").
      * ``"gram_refine"``: sigma_i = ||W q_i|| for the Gram's eigenvectors q_i (~2x the cost):
        ~1e-6 instead of ~1e-4 relative error for sigma around 1e-2 sigma_1, not below ~1e-4.
      * ``"gram64"``: the Gram in float64 (needs x64; without it, ``"svd"`` with a warning).
      * ``"svd"``: ``jnp.linalg.svd`` in the input precision: reference quality, slowest.

  Returns:
    (min(V, d),) array, descending, >= 0: float32 (float64 for float64 input under x64, or
    ``"gram64"`` under x64).
  """
  if method not in _METHODS:
    raise ValueError(f"singular_values: unknown method {method!r}; expected one of {_METHODS}")
  check_shapes("singular_values", w=(w, "V d"))  # a stack of matrices: jax.vmap
  w = at_least_f32(w)
  if w.shape[0] < w.shape[1]:
    w = w.T
  floor = 0.0
  if method == "auto":
    method = "gram64" if x64_enabled() else "gram"
    if method == "gram" and w.dtype == jnp.float32:
      floor = 16.0 * float(jnp.finfo(jnp.float32).eps)
  if method == "gram64" and not x64_enabled():
    warnings.warn("singular_values(method='gram64') needs jax_enable_x64; falling back to method='svd'",
                  stacklevel=2)
    method = "svd"
  if method == "svd":
    return jnp.maximum(jnp.linalg.svd(w, compute_uv=False), 0.0)  # LAPACK returns them descending
  if method == "gram_refine":
    _, q = jnp.linalg.eigh(_gram(w))
    b = jnp.matmul(w, q, precision=_HI)  # (V, d); column i = W q_i
    return jnp.sort(jnp.sqrt(jnp.sum(b * b, axis=0)))[::-1]
  lam = _eigvalsh(_gram(w.astype(jnp.float64 if method == "gram64" else w.dtype)))
  if method == "gram":
    lam = jnp.where(lam <= floor * lam[-1], 0.0, lam)
  return jnp.sqrt(jnp.maximum(lam, 0.0))[::-1]


def center_vocab(w):
  """Wc = (I - 11^T/V) W = W - 1 mean_v(W_v)^T for a (V, d) head (axis 0 = vocabulary).

  Wc is the component of W that changes the softmax: (W + 1 a^T) centres to the same Wc
  for every a in R^d (up to rounding). Computed as a mean subtraction, O(V d).

  Args:
    w: (V, d) head, any float dtype (bf16/f16 upcast to float32).

  Returns:
    (V, d) array, float32 (float64 for float64 input).
  """
  check_shapes("center_vocab", w=(w, "V d"))
  w = at_least_f32(w)
  return w - jnp.mean(w, axis=0, keepdims=True)


def raw_and_centred_singular_values(w, method: str = "auto"):
  """sigma(W) and sigma((I - 11^T/V) W) from one vmapped :func:`singular_values` (one
  compiled eigenvalue kernel, not two).

  Args:
    w: (V, d) head, any float dtype.
    method: as :func:`singular_values`.

  Returns:
    (2, min(V, d)) float32 array (float64 under x64): row 0 raw, row 1 centred, each
    descending.
  """
  check_shapes("raw_and_centred_singular_values", w=(w, "V d"))
  w = at_least_f32(w)
  return jax.vmap(lambda x: singular_values(x, method))(jnp.stack([w, center_vocab(w)]))

