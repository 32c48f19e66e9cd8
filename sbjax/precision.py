"""The matmul precision of the model, the heads, the losses and the attention
(``model.matmul_precision``); one helper, read by every dot and einsum of the model.

What a dtype means on each backend (JAX's defaults, with no precision given):

- CPU: float32 dots are full float32 whatever the precision; bf16 dots are bf16.
- NVIDIA GPU (Ampere and later): float32 dots run in TF32 (10-bit mantissa inputs, float32
  accumulation) unless the dot asks for ``HIGHEST``; bf16 dots use bf16 tensor cores.
- TPU: float32 dots run as one bf16 pass (``DEFAULT``), ``HIGH`` is 3 passes (~float24),
  ``HIGHEST`` 6 passes (~float32); bf16 dots are native.

``model.matmul_precision``:

- ``auto`` (default): ``HIGHEST`` when the compute dtype (``model.dtype``) is float32 or
  float64, so a float32 run is float32 on every backend, as on the CPU where the floors,
  gaps and parity tests were measured; for bf16/f16 compute no precision is set (``None``:
  the backend default, or ``jax.default_matmul_precision`` when set), the fast path;
- ``highest`` | ``high`` | ``default``: that ``jax.lax.Precision`` on every dot.

The cuDNN flash-attention kernel (bf16/f16 only) and the Pallas splash kernel take their
own precision: the policy reaches the einsum and ``dot_product_attention`` (XLA) kernels.
"""

from __future__ import annotations

import contextlib

import jax
from jax import lax

# the names besides "auto" (sbjax.config.MATMUL_PRECISIONS lists them all; this module does
# not import sbjax.config, so that the head modules can import it, see sbjax.heads.base)
_EXPLICIT = {"highest": lax.Precision.HIGHEST, "high": lax.Precision.HIGH,
             "default": lax.Precision.DEFAULT}
_FULL_DTYPES = ("float32", "float64")


def matmul_precision(cfg) -> lax.Precision | None:
  """The ``precision=`` of the model's dots for a ModelConfig ``cfg`` (module doc)."""
  name = cfg.matmul_precision
  if name == "auto":
    return for_dtype(cfg.dtype)
  return _EXPLICIT[name]  # (one of them: ModelConfig declares its choices)


def for_dtype(dtype) -> lax.Precision | None:
  """``auto`` for a library call with no config: ``HIGHEST`` for float32/float64 operands,
  ``None`` (the backend default) for bf16/f16, so float32 means float32 on every backend."""
  return lax.Precision.HIGHEST if jax.numpy.dtype(dtype).name in _FULL_DTYPES else None


def precision_scope(cfg):
  """A context in which dots that take no ``precision=`` argument (e.g. inside
  ``jax.nn.dot_product_attention``) get the policy's precision; a no-op for ``None``."""
  p = matmul_precision(cfg)
  if p is None:
    return contextlib.nullcontext()
  return jax.default_matmul_precision(p.name.lower())
