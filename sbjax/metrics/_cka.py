"""Linear CKA between activation matrices (Kornblith et al. 2019; Diehl Martinez et al. 2024;
``docs/metrics.md`` section 4.1). With the columns of X (n x d1) and Y (n x d2) centred,

    CKA(X, Y) = ||X^T Y||_F^2 / (||X^T X||_F ||Y^T Y||_F)      (the biased HSIC)

computed in sample space (n x n Grams, by ||X^T Y||_F^2 = <X X^T, Y Y^T>_F) where that is
cheaper for the static shapes: an evaluation order, not another estimator. ``debiased=True``
uses the unbiased HSIC of Song et al. (2012) in the feature-space form of Kornblith et al.'s
``cka.py``, with r_x the row norms^2 of the centred X (the common 1/(n(n-3)) cancels):

    HSIC_u(X, Y) ~ ||X^T Y||_F^2 - n/(n-2) <r_x, r_y> + ||X||_F^2 ||Y||_F^2 / ((n-1)(n-2))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ._util import acc_dtype, at_least_f32, check_shapes

_HI = lax.Precision.HIGHEST


def _centre(x):
  x = at_least_f32(x).astype(acc_dtype())
  return x - jnp.mean(x, axis=0, keepdims=True)


def _use_sample_space(n, d1, d2):
  feat = n * d1 * d2 + n * d1 * d1 + n * d2 * d2
  samp = n * n * (d1 + d2) + 3 * n * n
  return samp < feat


def _reference(y, sample_space):
  """(centred y, its Gram in the chosen space, that Gram's ||.||_F^2, the row norms^2)."""
  yc = _centre(y)
  gy = jnp.matmul(yc, yc.T, precision=_HI) if sample_space else jnp.matmul(yc.T, yc, precision=_HI)
  return yc, gy, jnp.sum(gy * gy), jnp.sum(yc * yc, axis=1)


def _cka(x, ref, n, sample_space, debiased):
  """CKA of x to a :func:`_reference`."""
  yc, gy, yy, ry = ref
  xc = _centre(x)
  rx = jnp.sum(xc * xc, axis=1)
  if sample_space:
    kx = jnp.matmul(xc, xc.T, precision=_HI)
    xty, xx = jnp.sum(kx * gy), jnp.sum(kx * kx)
  else:
    xy = jnp.matmul(xc.T, yc, precision=_HI)
    xtx = jnp.matmul(xc.T, xc, precision=_HI)
    xty, xx = jnp.sum(xy * xy), jnp.sum(xtx * xtx)
  if not debiased:
    den = jnp.sqrt(xx) * jnp.sqrt(yy)
    return jnp.where(den > 0, xty / jnp.where(den > 0, den, 1.0), jnp.nan)
  hxy = _debias(xty, rx, ry, n)
  hxx = _debias(xx, rx, rx, n)
  hyy = _debias(yy, ry, ry, n)
  ok = (hxx > 0) & (hyy > 0)
  den = jnp.sqrt(jnp.where(ok, hxx, 1.0)) * jnp.sqrt(jnp.where(ok, hyy, 1.0))
  return jnp.where(ok, hxy / den, jnp.nan)


def _debias(xty, rx, ry, n):
  return xty - n / (n - 2.0) * jnp.dot(rx, ry) + jnp.sum(rx) * jnp.sum(ry) / ((n - 1.0) * (n - 2.0))


def _to_reference(fn, acts, ref, debiased):
  """(K,) CKA of acts (K, n, d1) to ref (n, d2), the reference's side computed once."""
  dims = check_shapes(fn, acts=(acts, "K n d1"), ref=(ref, "n d2"))
  n, least = dims["n"], 4 if debiased else 2
  if n < least:
    raise ValueError(f"{fn}{'(debiased=True)' if debiased else ''} needs at least {least} samples, got n={n}")
  ss = _use_sample_space(n, dims["d1"], dims["d2"])
  r = _reference(ref, ss)
  return jax.vmap(lambda x: _cka(x, r, n, ss, debiased))(acts)


def linear_cka(x, y, debiased: bool = False):
  """Linear CKA between two activation matrices of the same n samples: CKA(X, X) = 1, invariant
  to orthogonal maps and isotropic scaling of either input.

  Args:
    x: (n, d1) activations (rows = samples), any float dtype (bf16 upcast).
    y: (n, d2) activations of the same samples.
    debiased: static; the unbiased HSIC (needs n >= 4).

  Returns:
    Scalar, float32 (float64 under x64); NaN for a constant (zero-variance) input, or a
    debiased self-similarity <= 0.
  """
  check_shapes("linear_cka", x=(x, "n d1"), y=(y, "n d2"))
  return _to_reference("linear_cka", jnp.asarray(x)[None], y, debiased)[0]


def cka_to_reference(acts, ref, debiased: bool = False):
  """:func:`linear_cka` of each of K activation matrices to one reference (the reference's
  Gram is computed once).

  Args:
    acts: (K, n, d1), e.g. K checkpoints of one layer.
    ref: (n, d2), e.g. the final checkpoint, the same n samples.
    debiased: static; as :func:`linear_cka`.

  Returns:
    (K,) float32 array (float64 under x64).
  """
  return _to_reference("cka_to_reference", acts, ref, debiased)


def cka_to_reference_by_layer(acts, ref, debiased: bool = False):
  """CKA of every checkpoint to a reference, layer by layer: entry [k, l] =
  linear_cka(acts[k, l], ref[l]) (the authors' protocol: each checkpoint against the final one).

  Args:
    acts: (K, L, n, d1): K checkpoints x L layers.
    ref: (L, n, d2): the reference's L layers, the same n samples.
    debiased: static; as :func:`linear_cka`.

  Returns:
    (K, L) float32 array (float64 under x64).
  """
  check_shapes("cka_to_reference_by_layer", acts=(acts, "K L n d1"), ref=(ref, "L n d2"))
  return jax.vmap(lambda a, r: cka_to_reference(a, r, debiased), in_axes=(1, 0), out_axes=1)(acts, ref)
