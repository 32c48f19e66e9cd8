"""Linear CKA between activation matrices (Kornblith et al. 2019; Diehl Martinez et al. 2024).

Feature-space linear CKA with the biased HSIC estimator (``docs/metrics.md`` section 4.1): centre the columns of
X (n x d1) and Y (n x d2), then

    CKA(X, Y) = ||X^T Y||_F^2 / (||X^T X||_F ||Y^T Y||_F).

The same numbers are computed in whichever space is cheaper for the static
shapes, using the exact identity ||X^T Y||_F^2 = <X X^T, Y Y^T>_F: for n = 128
samples and d = 768 the n x n (sample-space) Grams are ~6x cheaper than the
d x d ones.  This is a choice of evaluation order, not of estimator.

``debiased=True`` uses the unbiased HSIC estimator of Song et al. (2012), in
the feature-space form of Kornblith et al.'s reference ``cka.py``:

    HSIC_u(X, Y) ~ ||X^T Y||_F^2 - n/(n-2) <r_x, r_y> + ||X||_F^2 ||Y||_F^2 / ((n-1)(n-2))

with r_x = row-wise squared norms of the centred X (the common 1/(n(n-3))
factor cancels).  With n = 128 and d up to 2560 the biased estimator is biased
upward.  Needs n >= 4; if a debiased self-similarity is <= 0 (tiny n or
near-constant features) the result is NaN (undefined estimator, documented).

The authors' protocol (each checkpoint vs the final checkpoint, per layer, 128
sequences, last token) maps to :func:`cka_to_reference` /
:func:`cka_to_reference_by_layer`.
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


def _stats(x, y, sample_space):
  """(xty, xx, yy, rx, ry) for centred x, y; ||.||_F^2 quantities."""
  rx = jnp.sum(x * x, axis=1)
  ry = jnp.sum(y * y, axis=1)
  if sample_space:
    k = jnp.matmul(x, x.T, precision=_HI)
    l = jnp.matmul(y, y.T, precision=_HI)
    return jnp.sum(k * l), jnp.sum(k * k), jnp.sum(l * l), rx, ry
  xty = jnp.matmul(x.T, y, precision=_HI)
  xtx = jnp.matmul(x.T, x, precision=_HI)
  yty = jnp.matmul(y.T, y, precision=_HI)
  return jnp.sum(xty * xty), jnp.sum(xtx * xtx), jnp.sum(yty * yty), rx, ry


def _debias(xty, rx, ry, n):
  return xty - n / (n - 2.0) * jnp.dot(rx, ry) + jnp.sum(rx) * jnp.sum(ry) / ((n - 1.0) * (n - 2.0))


def _cka_from_stats(xty, xx, yy, rx, ry, n, debiased):
  if not debiased:
    den = jnp.sqrt(xx) * jnp.sqrt(yy)
    return jnp.where(den > 0, xty / jnp.where(den > 0, den, 1.0), jnp.nan)
  hxy = _debias(xty, rx, ry, n)
  hxx = _debias(xx, rx, rx, n)
  hyy = _debias(yy, ry, ry, n)
  ok = (hxx > 0) & (hyy > 0)
  den = jnp.sqrt(jnp.where(ok, hxx, 1.0)) * jnp.sqrt(jnp.where(ok, hyy, 1.0))
  return jnp.where(ok, hxy / den, jnp.nan)


def _check_n(fn, n, debiased):
  if debiased and n < 4:
    raise ValueError(f"{fn}(debiased=True) needs at least 4 samples, got n={n}")
  if n < 2:
    raise ValueError(f"{fn} needs at least 2 samples, got n={n}")


def linear_cka(x, y, debiased: bool = False):
  """Linear CKA between two activation matrices of the same n samples.

  Biased HSIC by default (Kornblith et al. 2019, as in the authors' code);
  ``debiased=True`` uses the Song et al. 2012 unbiased HSIC (see module doc).
  Invariant to orthogonal transforms and isotropic scaling of either input;
  CKA(X, X) = 1.

  Args:
    x: (n, d1) activations (rows = samples), any float dtype (bf16 upcast).
    y: (n, d2) activations of the same samples.
    debiased: static; the unbiased HSIC (needs n >= 4).

  Returns:
    Scalar, float32 (float64 under x64); NaN for a constant (zero-variance) input, or a
    debiased self-similarity <= 0.
  """
  dims = check_shapes("linear_cka", x=(x, "n d1"), y=(y, "n d2"))
  n, d1, d2 = dims["n"], dims["d1"], dims["d2"]
  _check_n("linear_cka", n, debiased)
  xc, yc = _centre(x), _centre(y)
  st = _stats(xc, yc, _use_sample_space(n, d1, d2))
  return _cka_from_stats(*st, n, debiased)


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
  dims = check_shapes("cka_to_reference", acts=(acts, "K n d1"), ref=(ref, "n d2"))
  n, d1, d2 = dims["n"], dims["d1"], dims["d2"]
  _check_n("cka_to_reference", n, debiased)
  ss = _use_sample_space(n, d1, d2)
  yc = _centre(ref)
  ry = jnp.sum(yc * yc, axis=1)
  if ss:
    ly = jnp.matmul(yc, yc.T, precision=_HI)
    yy = jnp.sum(ly * ly)
  else:
    yty = jnp.matmul(yc.T, yc, precision=_HI)
    yy = jnp.sum(yty * yty)

  def one(x):
    xc = _centre(x)
    rx = jnp.sum(xc * xc, axis=1)
    if ss:
      kx = jnp.matmul(xc, xc.T, precision=_HI)
      xty, xx = jnp.sum(kx * ly), jnp.sum(kx * kx)
    else:
      xy = jnp.matmul(xc.T, yc, precision=_HI)
      xtx = jnp.matmul(xc.T, xc, precision=_HI)
      xty, xx = jnp.sum(xy * xy), jnp.sum(xtx * xtx)
    return _cka_from_stats(xty, xx, yy, rx, ry, n, debiased)

  return jax.vmap(one)(acts)


def cka_to_reference_by_layer(acts, ref, debiased: bool = False):
  """CKA of every checkpoint to a reference, layer by layer: entry [k, l] =
  linear_cka(acts[k, l], ref[l]), in one fused call (vmap over layers of
  :func:`cka_to_reference`).

  Args:
    acts: (K, L, n, d1): K checkpoints x L layers.
    ref: (L, n, d2): the reference's L layers, the same n samples.
    debiased: static; as :func:`linear_cka`.

  Returns:
    (K, L) float32 array (float64 under x64).
  """
  check_shapes("cka_to_reference_by_layer", acts=(acts, "K L n d1"), ref=(ref, "L n d2"))
  return jax.vmap(lambda a, r: cka_to_reference(a, r, debiased), in_axes=(1, 0), out_axes=1)(acts, ref)
