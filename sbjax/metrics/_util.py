"""Small shared helpers for ``sbjax.metrics`` (pure jax.numpy, no flax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


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


def masked_mean_std(x, mask, ddof: int = 1):
    """(mean, std, n) of x over mask: mean = sum_m x / n, std = sqrt(sum_m (x - mean)^2 /
    max(n - ddof, 1)), n = number of True entries (0 entries give mean 0)."""
    m = jnp.asarray(mask, bool)
    n = jnp.sum(m).astype(x.dtype)
    mean = jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(n, 1.0)
    var = jnp.sum(jnp.where(m, jnp.square(x - mean), 0.0)) / jnp.maximum(n - ddof, 1.0)
    return mean, jnp.sqrt(var), n


def xlogx_safe(p):
    """p * log(p) with the convention 0 * log 0 = 0 (no NaN, no -inf)."""
    pos = p > 0
    return jnp.where(pos, p * jnp.log(jnp.where(pos, p, 1.0)), 0.0)


def tree_add(a, b):
    """Leaf-wise sum of two pytrees with the same structure (merge = add)."""
    return jax.tree_util.tree_map(jnp.add, a, b)
