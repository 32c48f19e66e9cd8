"""Lowering for CPU, CUDA and TPU without the hardware: one ``jax.export`` on an abstract mesh.

``export_checked(make_jit, args, platforms)`` traces a jitted function once, checks its
jaxpr for constructs that do not run on those platforms, and exports it with
``jax.export.export(fn_jit, platforms=platforms)`` to one StableHLO module for all of them
(default ``PLATFORMS`` = cpu, cuda, tpu); ``args`` are ``jax.ShapeDtypeStruct`` with
``NamedSharding`` on a ``jax.sharding.AbstractMesh`` (no devices needed). A failure raises
``LoweringError`` naming the construct and where it comes from:

- a host callback (``jax.pure_callback``, ``io_callback``, ``jax.debug.print/callback``)
  inside jit: it needs the host, and ``jax.export`` cannot serialise it;
- float64 / complex128 values (x64 enabled) when ``tpu`` is among the platforms (TPU has
  no float64 arithmetic);
- a primitive with no lowering for one of the platforms, e.g. ``tridiagonal`` (LAPACK /
  cuSOLVER ``sytrd``, nothing on TPU) used outside a per-platform choice;
- a sharding that does not divide a shape (the error of ``jax.jit`` names the argument).

Platform choices: sbjax picks backend-dependent code when the program is compiled, not when
it is traced (``jax.lax.platform_dependent``: the attention kernel of ``attn_impl=auto``,
the splash kernel's interpret mode, the spectra's Gram product; ``sbjax.per_platform``: the
spectra's eigenvalue routine). So a trace made on this CPU is the program each backend
runs, and nothing pretends to be another backend while tracing. Two kernels lower on one
platform only and are exported for it alone (``sbjax.attention``): ``attn_impl=cudnn``
(cuda) and ``attn_impl=splash`` compiled for tpu. cuDNN's version check needs a GPU; off a
GPU ``assume_cudnn_version`` answers ``ASSUMED_CUDNN`` (the head-dim limits are then those
of a pre-Hopper GPU, the stricter ones).

The entry points and the meshes: ``sbjax.lowering_suite``.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import jax
import numpy as np
from jax._src import source_info_util  # the user frame of an equation (no public API)
from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa  # its cuDNN version check
from jax.sharding import AbstractMesh, AxisType

PLATFORMS = ("cpu", "cuda", "tpu")  # one export for all three
KNOWN = ("cpu", "cuda", "rocm", "tpu")
ASSUMED_CUDNN = 91000  # cuDNN 9.10, the version assumed when exporting for cuda off-GPU
# cuDNN's attention targets carry no serialisation-compatibility guarantee; we export to
# check lowering, not to archive, so they are allowed (jax.export.DisabledSafetyCheck)
UNSTABLE_OK = tuple(jax.export.DisabledSafetyCheck.custom_call(t)
                    for t in cudnn_fa._custom_name_maps.values())
CALLBACKS = ("pure_callback", "io_callback", "debug_callback", "debug_print", "callback",
             "python_callback")
WIDE = (np.dtype("float64"), np.dtype("complex128"))
WHY = {  # primitive -> why it has no lowering on a platform
    "tridiagonal": "the LAPACK/cuSOLVER sytrd reduction; TPU has none: choose it per platform "
                   "(sbjax.per_platform, as the spectra's CPU eigenvalue path does) or use "
                   "jnp.linalg.eigvalsh",
}


class LoweringError(Exception):
  """A jitted function does not lower for its platforms (``platform``: their names joined by
  commas); ``problems`` names each construct."""

  def __init__(self, name: str, platform: str, problems: list[str]):
    self.name, self.platform, self.problems = name, platform, list(problems)
    super().__init__(f"{name} does not lower for {platform}: " + "; ".join(self.problems))


def abstract_mesh(shape: tuple[int, int, int]) -> AbstractMesh:
  """A (data, fsdp, tensor) mesh of ``prod(shape)`` devices that need not exist."""
  return AbstractMesh(tuple(shape), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)


@contextlib.contextmanager
def assume_cudnn_version(version: int = ASSUMED_CUDNN):
  """Within the block JAX's cuDNN version check answers ``version`` when this machine has no
  cuDNN (so the cuDNN attention kernel can be traced for a cuda export); else a no-op."""
  saved = cudnn_fa.check_cudnn_version
  if cudnn_fa.cuda_versions is None:
    cudnn_fa.check_cudnn_version = lambda: version
  try:
    yield
  finally:
    cudnn_fa.check_cudnn_version = saved


def check_platforms(platforms) -> tuple[str, ...]:
  """``platforms`` as a tuple of known names; a clear error otherwise."""
  platforms = tuple(platforms)
  bad = [p for p in platforms if p not in KNOWN]
  if bad or not platforms:
    raise ValueError(f"unknown platforms {bad or platforms!r}; allowed: a non-empty subset of "
                     f"{KNOWN}, e.g. {PLATFORMS}")
  return platforms


# ----------------------------------------------------------------------------- jaxpr scan


def _subjaxprs(params: dict):
  for v in params.values():
    for x in (v if isinstance(v, (list, tuple)) else (v,)):
      if hasattr(x, "eqns"):
        yield x
      elif hasattr(x, "jaxpr") and hasattr(x.jaxpr, "eqns"):
        yield x.jaxpr


def iter_eqns(jaxpr):
  """Every equation of ``jaxpr`` (a Jaxpr or ClosedJaxpr), nested ones included."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  for eqn in jaxpr.eqns:
    yield eqn
    for sub in _subjaxprs(eqn.params):
      yield from iter_eqns(sub)


def where(eqn) -> str:
  """``file:line (function)`` of the user code that made ``eqn``."""
  try:
    return source_info_util.summarize(eqn.source_info)
  except Exception:  # noqa: BLE001 - a location is a courtesy, never a failure
    return "unknown location"


def scan_jaxpr(jaxpr, platforms, limit: int = 5) -> list[str]:
  """The constructs of ``jaxpr`` that cannot run on ``platforms`` (at most ``limit`` of each
  kind): host callbacks, and float64/complex128 values when tpu is among them."""
  callbacks, wide = [], []
  for eqn in iter_eqns(jaxpr):
    name = eqn.primitive.name
    if name in CALLBACKS and len(callbacks) < limit:
      callbacks.append(f"host callback '{name}' at {where(eqn)} (a callback needs the host "
                       "and cannot be exported; compute it in jax.numpy or outside jit)")
    if "tpu" in platforms and len(wide) < limit:
      for v in eqn.outvars:
        dt = getattr(getattr(v, "aval", None), "dtype", None)
        if dt is not None and dt in WIDE:  # (a PRNG key dtype is no numpy dtype)
          wide.append(f"{np.dtype(dt).name} value from '{name}' at {where(eqn)} (TPU has no "
                      "float64; keep x64 off or cast to float32)")
          break
  return callbacks + wide


def _explain(err: Exception, jaxpr) -> str:
  """The failing construct of a lowering error, with the source of its first equation."""
  msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
  m = re.search(r"primitive '?([\w\-]+)'? not found for (platforms? [^\n]+)", str(err))
  if m:
    prim = m.group(1)
    site = next((where(e) for e in iter_eqns(jaxpr) if e.primitive.name == prim), "?")
    extra = f": {WHY[prim]}" if prim in WHY else ""
    return f"primitive '{prim}' at {site} has no lowering ({m.group(2)}){extra}"
  return f"{type(err).__name__}: {msg}"


# ----------------------------------------------------------------------------- export


def custom_calls(exported) -> list[str]:
  """The custom-call targets of an exported module (e.g. ``Eigh``, ``tpu_custom_call``)."""
  return sorted(set(re.findall(r"custom_call @([\w$.\-]+)", exported.mlir_module())))


def export_checked(make_jit, args: tuple, platforms=PLATFORMS, name: str = "function",
                   cudnn_version: bool = False):
  """One ``jax.export`` of ``make_jit()`` (a function returning a fresh ``jax.jit``) at
  ``args`` for all of ``platforms``; returns the ``Exported``. ``cudnn_version``: trace under
  ``assume_cudnn_version`` (a program with cuDNN attention, exported off a GPU).

  Raises ``LoweringError`` naming the constructs that do not lower (see the module doc)."""
  platforms = check_platforms(platforms)
  where_to = ",".join(platforms)
  with assume_cudnn_version() if cudnn_version else contextlib.nullcontext():
    fn = make_jit()
    try:
      traced = fn.trace(*args)
    except Exception as e:  # noqa: BLE001 - e.g. a sharding that does not divide a shape
      raise LoweringError(name, where_to, [f"tracing failed: {type(e).__name__}: "
                                           f"{str(e).strip()[:400]}"]) from e
    problems = scan_jaxpr(traced.jaxpr, platforms)
    if problems:
      raise LoweringError(name, where_to, problems)
    try:
      return jax.export.export(fn, platforms=list(platforms), disabled_checks=UNSTABLE_OK)(*args)
    except Exception as e:  # noqa: BLE001 - name the construct
      raise LoweringError(name, where_to, [_explain(e, traced.jaxpr)]) from e


def sds(tree, shardings):
  """``jax.ShapeDtypeStruct`` leaves of ``tree`` (arrays or structs) with ``shardings``."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def timed_export(make_jit, args, platforms, name: str, cudnn_version: bool = False
                 ) -> dict[str, Any]:
  """``export_checked`` with its wall time and the module's custom calls, as a row."""
  t0 = time.perf_counter()
  exp = export_checked(make_jit, args, platforms, name, cudnn_version)
  return {"entry": name, "platforms": list(exp.platforms),
          "seconds": round(time.perf_counter() - t0, 2), "devices": exp.nr_devices,
          "custom_calls": custom_calls(exp)}
