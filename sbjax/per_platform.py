"""A function whose branches are lowered only for their own platform, for the branches that
``jax.lax.platform_dependent`` cannot hold: in JAX 0.10 a multi-platform ``jax.export`` lowers
each of its branches for every platform, so a branch with a primitive that has no lowering
on one of them (``lax.linalg.tridiagonal``: none on TPU) fails the export.
``per_platform_op`` makes a primitive with one lowering rule per platform
(``mlir.register_lowering(..., platform=)``, as JAX's own linear algebra does).

The branches must be pure functions of arrays to one array, of the shape and dtype of the
``default`` branch's, that accept leading batch axes (``jax.vmap`` moves the mapped axis
first). No derivative rule: use ``platform_dependent`` for differentiated code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

_REGISTERED: dict = {}  # name -> the function of its primitive


def _moved(args, dims):
  """The arguments with the batch axis first (unbatched ones broadcast along it)."""
  n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  return [jnp.broadcast_to(a, (n,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
          for a, d in zip(args, dims)]


def per_platform_op(name: str, default, **per_platform):
  """``fn(*arrays)`` computing ``per_platform[p](*arrays)`` on platform ``p`` ("cpu",
  "cuda", "rocm", "tpu") and ``default(*arrays)`` elsewhere. ``name`` names the primitive
  (one per name: a second call returns the first one's function)."""
  if name in _REGISTERED:
    return _REGISTERED[name]
  prim = Primitive(name)
  eager = jax.jit(prim.bind)  # outside jit: compile the primitive alone (once per shape)
  prim.def_impl(lambda *args: eager(*args))

  def abstract(*avals):
    out = jax.eval_shape(default, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals])
    return jax.core.ShapedArray(out.shape, out.dtype)

  prim.def_abstract_eval(abstract)
  mlir.register_lowering(prim, mlir.lower_fun(default, multiple_results=False))
  for platform, fn in per_platform.items():
    mlir.register_lowering(prim, mlir.lower_fun(fn, multiple_results=False), platform=platform)
  batching.primitive_batchers[prim] = lambda args, dims: (prim.bind(*_moved(args, dims)), 0)
  _REGISTERED[name] = prim.bind
  return _REGISTERED[name]
