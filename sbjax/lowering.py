"""Lowering for TPU and CUDA without the hardware: ``jax.export`` on an abstract mesh.

``export_checked(fn_jit, args, platform)`` traces a jitted function for ``platform``
(``tpu`` or ``cuda``), checks its jaxpr for constructs that do not run there, and exports
it (``jax.export.export(fn_jit, platforms=[platform])``) to StableHLO; ``args`` are
``jax.ShapeDtypeStruct`` with ``NamedSharding`` on a ``jax.sharding.AbstractMesh`` (no
devices needed). A failure raises ``LoweringError`` naming the construct and where it comes
from:

- a host callback (``jax.pure_callback``, ``io_callback``, ``jax.debug.print/callback``)
  inside jit: it needs the host, and ``jax.export`` cannot serialise it;
- float64 / complex128 values (x64 enabled) for ``tpu``, which has no float64 arithmetic;
- a primitive with no lowering for the platform, e.g. the CPU eigenvalue path of the
  spectra (``tridiagonal``: LAPACK/cuSOLVER ``sytrd``, nothing on TPU);
- a sharding that does not divide a shape (the error of ``jax.jit`` names the argument).

Platform choices made at trace time: sbjax picks some kernels with ``jax.default_backend()``
(the attention kernel, ``sbjax.attention.resolve``; the spectra's eigenvalue routine and Gram
product, ``sbjax.metrics.spectrum``). ``target_backend(platform)`` makes
``jax.default_backend()`` answer the target's name while tracing, so the program exported is
the one that machine would trace (for ``cuda`` cuDNN attention is assumed available, as on
a lent GPU). jit's trace caches are keyed by function and shapes, not by this override, so
``target_backend`` clears them (``jax.clear_caches()``) on entry and exit: a trace made for
one platform is never reused for another (nor run here). The cost: the process recompiles
what it jitted before (the persistent compilation cache still holds it).

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

from sbjax import attention

PLATFORMS = ("tpu", "cuda")
BACKEND_OF = {"tpu": "tpu", "cuda": "gpu", "rocm": "gpu", "cpu": "cpu"}
ASSUMED_CUDNN = 91000  # cuDNN 9.10, the version assumed when exporting for cuda off-GPU
# cuDNN's attention targets carry no serialisation-compatibility guarantee; we export to
# check lowering, not to archive, so they are allowed (jax.export.DisabledSafetyCheck)
UNSTABLE_OK = tuple(jax.export.DisabledSafetyCheck.custom_call(t)
                    for t in cudnn_fa._custom_name_maps.values())
CALLBACKS = ("pure_callback", "io_callback", "debug_callback", "debug_print", "callback",
             "python_callback")
WIDE = (np.dtype("float64"), np.dtype("complex128"))
WHY = {  # primitive -> why it has no lowering on an accelerator
    "tridiagonal": "the LAPACK/cuSOLVER sytrd reduction (the CPU eigenvalue path of the "
                   "spectra); TPU has none: use jnp.linalg.eigvalsh there",
}


class LoweringError(Exception):
  """A jitted function does not lower for a platform; ``problems`` names each construct."""

  def __init__(self, name: str, platform: str, problems: list[str]):
    self.name, self.platform, self.problems = name, platform, list(problems)
    super().__init__(f"{name} does not lower for {platform}: " + "; ".join(self.problems))


def abstract_mesh(shape: tuple[int, int, int]) -> AbstractMesh:
  """A (data, fsdp, tensor) mesh of ``prod(shape)`` devices that need not exist."""
  return AbstractMesh(tuple(shape), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)


@contextlib.contextmanager
def target_backend(platform: str, cudnn: bool = True):
  """While tracing for ``platform``, ``jax.default_backend()`` answers its backend name
  (``cuda`` -> ``gpu``), and on ``cuda`` cuDNN attention counts as available (``cudnn``):
  JAX's cuDNN version check answers ``ASSUMED_CUDNN`` when this machine has no cuDNN (the
  head-dim limits are then those of a pre-Hopper GPU, the stricter ones).

  cuDNN attention on a mesh of several devices is a ``custom_partitioning`` op, whose
  partitioner is a host callback: ``jax.export`` cannot serialise it (and cannot lower it on
  an ``AbstractMesh`` at all). Sharded programs are therefore exported with ``cudnn=False``
  (XLA attention, the fallback of ``attn_impl=auto``), the cuDNN kernel on one device."""
  if platform not in BACKEND_OF:
    raise ValueError(f"unknown platform {platform!r}; allowed: {sorted(BACKEND_OF)}")
  saved, saved_check = jax.default_backend, cudnn_fa.check_cudnn_version
  jax.clear_caches()  # no trace made for this machine is reused for the target ...
  jax.default_backend = lambda: BACKEND_OF[platform]
  if platform == "cuda" and cudnn_fa.cuda_versions is None:
    cudnn_fa.check_cudnn_version = lambda: ASSUMED_CUDNN
  try:
    with attention.assume_cudnn(platform == "cuda" and cudnn):
      yield
  finally:
    jax.default_backend, cudnn_fa.check_cudnn_version = saved, saved_check
    jax.clear_caches()  # ... and none made for the target is run here


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


def scan_jaxpr(jaxpr, platform: str, limit: int = 5) -> list[str]:
  """The constructs of ``jaxpr`` that cannot run on ``platform`` (at most ``limit`` of each
  kind): host callbacks, and float64/complex128 values on tpu."""
  callbacks, wide = [], []
  for eqn in iter_eqns(jaxpr):
    name = eqn.primitive.name
    if name in CALLBACKS and len(callbacks) < limit:
      callbacks.append(f"host callback '{name}' at {where(eqn)} (a callback needs the host "
                       "and cannot be exported; compute it in jax.numpy or outside jit)")
    if platform == "tpu" and len(wide) < limit:
      for v in eqn.outvars:
        dt = getattr(getattr(v, "aval", None), "dtype", None)
        if dt is not None and np.dtype(dt) in WIDE:
          wide.append(f"{np.dtype(dt).name} value from '{name}' at {where(eqn)} (TPU has no "
                      "float64; keep x64 off or cast to float32)")
          break
  return callbacks + wide


def _explain(err: Exception, jaxpr) -> str:
  """The failing construct of a lowering error, with the source of its first equation."""
  msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
  m = re.search(r"primitive '?([\w\-]+)'? not found for platform", str(err))
  if m:
    prim = m.group(1)
    site = next((where(e) for e in iter_eqns(jaxpr) if e.primitive.name == prim), "?")
    extra = f": {WHY[prim]}" if prim in WHY else ""
    return f"primitive '{prim}' at {site} has no lowering{extra}"
  return f"{type(err).__name__}: {msg}"


# ----------------------------------------------------------------------------- export


def custom_calls(exported) -> list[str]:
  """The custom-call targets of an exported module (e.g. ``Eigh``, ``tpu_custom_call``)."""
  return sorted(set(re.findall(r"custom_call @([\w$.\-]+)", exported.mlir_module())))


def export_checked(make_jit, args: tuple, platform: str, name: str = "function",
                   cudnn: bool = True):
  """``jax.export`` of ``make_jit()`` (a function returning a fresh ``jax.jit``, called under
  ``target_backend(platform, cudnn)``) at ``args``; returns the ``Exported``.

  Raises ``LoweringError`` naming the constructs that do not lower (see the module doc)."""
  with target_backend(platform, cudnn):
    fn = make_jit()
    try:
      traced = fn.trace(*args)
    except Exception as e:  # noqa: BLE001 - e.g. a sharding that does not divide a shape
      raise LoweringError(name, platform, [f"tracing failed: {type(e).__name__}: "
                                           f"{str(e).strip()[:400]}"]) from e
    problems = scan_jaxpr(traced.jaxpr, platform)
    if problems:
      raise LoweringError(name, platform, problems)
    try:
      return jax.export.export(fn, platforms=[platform], disabled_checks=UNSTABLE_OK)(*args)
    except Exception as e:  # noqa: BLE001 - name the construct
      raise LoweringError(name, platform, [_explain(e, traced.jaxpr)]) from e


def sds(tree, shardings):
  """``jax.ShapeDtypeStruct`` leaves of ``tree`` (arrays or structs) with ``shardings``."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def timed_export(make_jit, args, platform: str, name: str, cudnn: bool = True) -> dict[str, Any]:
  """``export_checked`` with its wall time and the module's custom calls, as a row."""
  t0 = time.perf_counter()
  exp = export_checked(make_jit, args, platform, name, cudnn)
  return {"entry": name, "platform": platform, "seconds": round(time.perf_counter() - t0, 2),
          "devices": exp.nr_devices, "custom_calls": custom_calls(exp)}
