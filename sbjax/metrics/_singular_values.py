"""Singular values of LM heads (Godey et al. 2024; Diehl Martinez et al. 2024): the Gram route,
its float32 noise floor, the vocabulary centring (``docs/metrics.md`` section 1).

The eigenvalue kernel is one primitive lowered per platform (``sbjax.per_platform``), made on
the first call of :func:`singular_values` (importing this module registers nothing with JAX).
Gradients flow through it: its derivative rule is the eigenvalue perturbation
d lambda_i = q_i^T dG q_i, with the eigenvectors q_i of ``jnp.linalg.eigh`` computed only when
differentiating (a singular value floored to 0 by ``method="auto"`` gets a zero gradient).
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
  """CPU: LAPACK ``sytrd`` to tridiagonal form, then bisection (batch axes allowed)."""
  _, diag, off, _ = lax.linalg.tridiagonal(g, lower=True)
  eig = lambda d, e: jnp.sort(eigh_tridiagonal(d, e, eigvals_only=True))  # noqa: E731
  for _ in range(g.ndim - 2):
    eig = jax.vmap(eig)
  return eig(diag, off)


# one primitive lowered per platform (sbjax.per_platform): tridiagonal has no TPU lowering,


@functools.cache
def _eigvalsh_op():
  """The primitive (made and registered with JAX on first use): tridiagonal has no TPU
  lowering, so it cannot sit in a lax.platform_dependent branch of a (cpu, cuda, tpu) export."""
  return per_platform_op("sbjax_spectrum_eigvalsh", jnp.linalg.eigvalsh, cpu=_eigvalsh_cpu)


@jax.custom_jvp
def _eigvalsh(g):
  """Ascending eigenvalues of a symmetric matrix, without eigenvectors.

  ``jnp.linalg.eigvalsh`` calls LAPACK ``syevd`` with eigenvectors (jobz='V')
  and discards them.  On CPU we instead reduce to tridiagonal form (LAPACK
  ``sytrd``, (4/3) d^3 flops) and find the eigenvalues by bisection
  (``jax.scipy.linalg.eigh_tridiagonal``), measured ~2.5x faster at d=512
  with the same accuracy (~1e-7 relative in float32).  Other platforms keep
  ``eigvalsh``.  The routine is chosen per platform when the program is
  compiled (``sbjax.per_platform``), so one export serves cpu, cuda and tpu.
  """
  return _eigvalsh_op()(g)


@_eigvalsh.defjvp
def _eigvalsh_jvp(primals, tangents):
  """d lambda_i = q_i^T dG q_i (first-order perturbation of a symmetric matrix's eigenvalues)."""
  (g,), (dg,) = primals, tangents
  _, q = jnp.linalg.eigh(g)
  return _eigvalsh(g), jnp.einsum("...ji,...jk,...ki->...i", q, dg, q, precision=_HI)


def _gram_plain(w):
  return jnp.matmul(w.T, w, precision=_HI)


def _gram_half(w):
  """[W1 W2]^T [W1 W2] from W1^T [W1 W2] and W2^T W2 (the lower-left block mirrored)."""
  h = w.shape[1] // 2

  def dg(x, y):
    return lax.dot_general(x, y, (((0,), (0,)), ((), ())), precision=_HI)

  top = dg(w[:, :h], w)  # (h, d) = [G11 G12]
  g22 = dg(w[:, h:], w[:, h:])
  return jnp.concatenate([top, jnp.concatenate([top[:, h:].T, g22], axis=1)], axis=0)


def _gram(w):
  """G = W^T W for a tall (V, d) W.

  On CPU with an even d >= 256 only the upper block row pair is multiplied:
  [W1 W2]^T [W1 W2] needs W1^T [W1 W2] and W2^T W2 (3/4 of the flops), and the
  lower-left block is the transpose of the upper-right one.  Bitwise equal to
  the plain product there, measured ~9% faster at 16 x 50000 x 512 (XLA:CPU has
  no syrk).  Other platforms (``lax.platform_dependent``, chosen when the
  program is compiled) and small d use the plain matmul.
  """
  d = w.shape[1]
  if d % 2 or d < 256:
    return _gram_plain(w)
  return lax.platform_dependent(w, cpu=_gram_half, default=_gram_plain)


def _gram_eigs(w, dtype):
  return _eigvalsh(_gram(w.astype(dtype)))


def singular_values(w, method: str = "auto"):
  """Singular values of a 2-D matrix, descending, length min(V, d).

  For a tall V x d matrix (V >= d) the singular values are obtained from the
  eigenvalues of the d x d Gram matrix ``G = W^T W`` (sigma_i = sqrt(lambda_i)),
  which costs O(V d^2) at matmul speed instead of an SVD.  A wide matrix
  (V < d) is transposed first.  Eigenvalues are clamped to >= 0 before the
  square root, so rank-deficient input gives exact zeros, never NaN.

  Args:
    w: (V, d) array, any float dtype (bf16/f16 are upcast to float32).
    method:
      * ``"gram"``: float32 (or float64 if ``w`` is float64) Gram + ``eigvalsh``.
        The absolute error of lambda = sigma^2 is ~eps * sigma_1^2, so singular
        values below ~sqrt(eps_f32) * sigma_1 ~ 3e-4 * sigma_1 are unreliable
        (relative error ~ eps * sigma_1^2 / sigma_i^2).  Top singular values
        are accurate to ~1e-6 relative.
      * ``"gram_refine"``: float32 Gram eigenvectors Q, then sigma_i = ||W q_i||
        (one more V x d x d matmul, ~2x the cost of ``"gram"``).  These
        Rayleigh quotients are computed from W itself, which improves the
        mid range (measured: ~1e-4 -> ~1e-6 relative error for sigma around
        1e-2 sigma_1), but eigenvector contamination from larger directions
        still limits sigma below ~1e-4 sigma_1.
      * ``"gram64"``: cast to float64, Gram and ``eigvalsh`` in float64.  Needs
        ``jax_enable_x64``; without it this falls back to ``"svd"`` (with a
        warning), because float64 is not available.
      * ``"svd"``: ``jnp.linalg.svd(compute_uv=False)`` in the input precision
        (>= float32).  Reference-quality, slowest.
      * ``"auto"`` (default): ``"gram64"`` when x64 is enabled, otherwise
        ``"gram"`` (float32) with a rounding-noise floor: eigenvalues
        lambda_i <= 16 eps_f32 lambda_max (observed f32 rounding noise is
        ~1.5 eps lambda_max) are set to exactly 0, i.e. sigma_i below
        ~1.4e-3 sigma_1 is reported as 0.  This makes rank-deficient heads
        exact (rank 1 -> KL = log n) instead of returning noise of size
        ~sqrt(eps) sigma_1 in the null space.  The float32 path is the fast
        one for large heads; use ``"gram64"`` (x64) or ``"svd"`` when
        sigma_i / sigma_1 < ~1e-3 matters (e.g. :func:`condition_number` of
        ill-conditioned heads).
        ``"gram_refine"`` recovers sigma in ~[1e-3, 3e-2] sigma_1 ~10-100x
        more accurately than ``"gram"`` but not below ~1e-4 sigma_1.

  Returns:
    (min(V, d),) array of singular values, descending, >= 0.  dtype float32
    (float64 for float64 input under x64 or method="gram64" under x64).
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
    warnings.warn(
        "singular_values(method='gram64') needs jax_enable_x64; falling back to method='svd'",
        stacklevel=2,
    )
    method = "svd"

  return _sv_by_method(w, method, floor)


def _sv_by_method(w, method: str, floor: float):
  """Singular values of a tall float matrix by a resolved ``method`` (see
  :func:`singular_values`): sigma_i = sqrt(max(lambda_i(W^T W), 0)), descending, with
  lambda_i <= floor * lambda_max set to 0 (``"gram"``), or sigma_i = ||W q_i|| for the
  Gram eigenvectors q_i (``"gram_refine"``), or LAPACK's SVD (``"svd"``)."""
  if method == "svd":
    s = jnp.linalg.svd(w, compute_uv=False)
    return jnp.maximum(s, 0.0)  # LAPACK already returns descending order
  if method == "gram64":
    lam = _gram_eigs(w, jnp.float64)
    return jnp.sqrt(jnp.maximum(lam, 0.0))[::-1]
  if method == "gram":
    lam = _gram_eigs(w, w.dtype)
    lam = jnp.where(lam <= floor * lam[-1], 0.0, lam)
    return jnp.sqrt(jnp.maximum(lam, 0.0))[::-1]
  # gram_refine
  _, q = jnp.linalg.eigh(_gram(w))
  b = jnp.matmul(w, q, precision=_HI)  # (V, d); column i = W q_i
  s = jnp.sqrt(jnp.sum(b * b, axis=0))
  return jnp.sort(s)[::-1]


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


def centred_singular_values(w, method: str = "auto"):
  """sigma((I - 11^T/V) W): the singular values of the vocabulary-centred head.

  Args:
    w: (V, d) head, any float dtype.
    method: as :func:`singular_values`.

  Returns:
    (min(V, d),) float32 array (float64 under x64), descending, >= 0.
  """
  return singular_values(center_vocab(w), method)


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

