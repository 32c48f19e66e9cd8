"""Lowering for CPU, CUDA and TPU without the hardware: one ``jax.export`` on an abstract mesh.

``export_checked(make_jit, args, platforms)`` exports ``make_jit()`` (a ``jax.jit``) at ``args``
once for all ``platforms`` (default cpu, cuda, tpu); ``args`` are ``jax.ShapeDtypeStruct`` with
``NamedSharding`` on a ``jax.sharding.AbstractMesh`` (no devices needed). sbjax picks
backend-dependent code when a program is compiled, not when it is traced
(``jax.lax.platform_dependent``, ``sbjax.per_platform``), so a trace made on this CPU is the
program each backend runs. A function that does not lower (a host callback, a primitive with no
lowering on one platform, a sharding that does not divide a shape) raises ``LoweringError``
naming it, the platforms and JAX's error. The entry points and the meshes:
``sbjax.lowering_suite``.
"""

from __future__ import annotations

import re

import jax
from jax.sharding import AbstractMesh, AxisType

PLATFORMS = ("cpu", "cuda", "tpu")  # one export for all three


class LoweringError(Exception):
  """A jitted function does not lower for its platforms."""


def abstract_mesh(shape: tuple[int, int, int]) -> AbstractMesh:
  """A (data, fsdp, tensor) mesh of ``prod(shape)`` devices that need not exist."""
  return AbstractMesh(tuple(shape), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)


def sds(tree, shardings):
  """``jax.ShapeDtypeStruct`` leaves of ``tree`` (arrays or structs) with ``shardings``."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def custom_calls(exported) -> list[str]:
  """The custom-call targets of an exported module (e.g. ``Eigh``, ``tpu_custom_call``)."""
  return sorted(set(re.findall(r"custom_call @([\w$.\-]+)", exported.mlir_module())))


def export_checked(make_jit, args: tuple, platforms=PLATFORMS, name: str = "function"):
  """One ``jax.export`` of ``make_jit()`` at ``args`` for all of ``platforms``; returns the
  ``Exported`` or raises ``LoweringError`` (module doc)."""
  try:
    return jax.export.export(make_jit(), platforms=list(platforms))(*args)
  except Exception as e:  # noqa: BLE001 - whatever JAX raises, named with the function
    msg = (str(e).strip().splitlines() or [""])[0][:400]
    raise LoweringError(f"{name} does not lower for {','.join(platforms)}: "
                        f"{type(e).__name__}: {msg}") from e
