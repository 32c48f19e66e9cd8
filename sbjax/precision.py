"""The matmul precision of the model, the heads, the losses and the attention
(``model.matmul_precision``); one helper, read by every dot and einsum of the model.

With no precision given, float32 dots are full float32 on CPU, TF32 on an NVIDIA GPU (Ampere
and later) and one bf16 pass on TPU. ``model.matmul_precision``:

- ``auto`` (default): ``HIGHEST`` when the compute dtype (``model.dtype``) is float32 or
  float64, so a float32 run is float32 on every backend; for bf16/f16 compute ``None`` (the
  backend default, or ``jax.default_matmul_precision`` when set);
- ``highest`` | ``high`` | ``default``: that ``jax.lax.Precision`` on every dot.
"""

from __future__ import annotations

import contextlib

import jax
from jax import lax

# the names besides "auto" (sbjax.config.MATMUL_PRECISIONS lists them all)
_EXPLICIT = {"highest": lax.Precision.HIGHEST, "high": lax.Precision.HIGH,
             "default": lax.Precision.DEFAULT}
_FULL_DTYPES = ("float32", "float64")


def matmul_precision(cfg) -> lax.Precision | None:
  """The ``precision=`` of the model's dots for a ModelConfig ``cfg`` (module doc)."""
  name = cfg.matmul_precision
  return for_dtype(cfg.dtype) if name == "auto" else _EXPLICIT[name]


def for_dtype(dtype) -> lax.Precision | None:
  """``auto`` for a library call with no config: ``HIGHEST`` for float32/float64 operands,
  ``None`` (the backend default) for bf16/f16, so float32 means float32 on every backend."""
  return lax.Precision.HIGHEST if jax.numpy.dtype(dtype).name in _FULL_DTYPES else None


def precision_scope(cfg):
  """A context in which dots that take no ``precision=`` argument (e.g. inside
  ``jax.nn.dot_product_attention``) get the policy's precision; a no-op for ``None``."""
  p = matmul_precision(cfg)
  return contextlib.nullcontext() if p is None else jax.default_matmul_precision(p.name.lower())
