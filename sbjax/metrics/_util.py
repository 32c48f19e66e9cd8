"""Small shared helpers for ``sbjax.metrics`` (pure jax.numpy, no flax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def x64_enabled() -> bool:
  """True when ``jax_enable_x64`` is on (checked at trace time)."""
  return bool(jax.config.jax_enable_x64)


def acc_dtype():
  """Accumulation dtype: float64 when x64 is enabled, else float32."""
  return jnp.float64 if x64_enabled() else jnp.float32


def int_acc_dtype():
  """Integer count dtype: int64 when x64 is enabled, else int32."""
  return jnp.int64 if x64_enabled() else jnp.int32


def at_least_f32(x):
  """Upcast bf16/f16 (and ints) to float32; keep float32/float64 as they are."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating) or jnp.finfo(x.dtype).bits < 32:
    return x.astype(jnp.float32)
  return x


def moments(x, m):
  """(n, mean, M2) of x over the bool mask m: n True entries, M2 = sum_m (x - mean)^2 (an empty
  mask gives mean 0). Merged across blocks by ``_pairs.moments_merge`` (Chan et al.)."""
  n = jnp.sum(m).astype(x.dtype)
  mean = jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(n, 1)
  return n, mean, jnp.sum(jnp.where(m, jnp.square(x - mean), 0.0))


def mean_std(mom, ddof):
  """(mean, std, n) of :func:`moments`: std = sqrt(M2 / max(n - ddof, 1))."""
  n, mean, m2 = mom
  return mean, jnp.sqrt(jnp.maximum(m2 / jnp.maximum(n - ddof, 1), 0.0)), n


def xlogx_safe(p):
  """p * log(p) with the convention 0 * log 0 = 0 (no NaN, no -inf)."""
  pos = p > 0
  return jnp.where(pos, p * jnp.log(jnp.where(pos, p, 1.0)), 0.0)


def check_shapes(fn: str, **args) -> dict:
  """One ``ValueError`` for the first argument whose shape disagrees, at trace time.

  Each keyword is ``name=(array_or_None, "N d")``: the dimensions named in the spec are bound
  by the first argument that has them (left to right), so a later argument is checked against
  them. None skips an argument. Returns the bound dimensions, e.g. ``{"N": 100, "d": 64}``.
  The message names the function, the argument, the shape it got and the shape expected::

    neural_collapse: w has shape (64, 12), expected (V, d=64)
  """
  dims: dict = {}
  for name, (x, spec) in args.items():
    if x is None:
      continue
    want, got = spec.split(), tuple(np.shape(x))
    if len(got) != len(want) or any(dims.get(w, g) != g for w, g in zip(want, got)):
      exp = ", ".join(f"{w}={dims[w]}" if w in dims else w for w in want)
      raise ValueError(f"{fn}: {name} has shape {got}, expected ({exp}{',' if len(want) == 1 else ''})")
    dims.update(zip(want, got))
  return dims


def host_only(fn: str, instead: str, *arrays) -> None:
  """A host wrapper called on traced arrays (under ``jax.jit``/``jax.vmap``): one line naming the
  pure function to use instead."""
  if any(isinstance(x, jax.core.Tracer) for x in arrays):
    raise TypeError(f"{fn} checks concrete arrays on the host and cannot be traced "
                    f"(jax.jit, jax.vmap); use sbjax.metrics.{instead} there")
