"""The matmul precision policy (``model.matmul_precision``, ``sbjax.precision``): what each
name means, and the dots of the real train step exported for a GPU from this CPU host
(StableHLO ``precision_config`` of every dot_general / convolution)."""

import re
from collections import Counter

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from sbjax import losses
from sbjax import lowering as low
from sbjax import lowering_suite as S
from sbjax import precision
from sbjax.config import ModelConfig

DOT = re.compile(r"stablehlo\.(dot_general|convolution)\b")
PREC = re.compile(r"precision = \[(\w+), (\w+)\]")
ALGO = re.compile(r"algorithm = <lhs_precision_type = (\w+), rhs_precision_type = (\w+), "
                  r"accumulation_type = (\w+)")


@pytest.mark.parametrize("dtype, name, want", [
    ("float32", "auto", lax.Precision.HIGHEST),
    ("float64", "auto", lax.Precision.HIGHEST),
    ("bfloat16", "auto", None),  # the backend default (or jax.default_matmul_precision)
    ("float16", "auto", None),
    ("bfloat16", "highest", lax.Precision.HIGHEST),
    ("float32", "high", lax.Precision.HIGH),
    ("float32", "default", lax.Precision.DEFAULT),
])
def test_policy(dtype, name, want):
  cfg = ModelConfig(dtype=dtype, param_dtype="float64" if dtype == "float64" else "float32",
                    matmul_precision=name)
  assert precision.matmul_precision(cfg) == want


def _kind(line: str):
  """A dot's precision: ``("HIGHEST", "HIGHEST")`` etc. (no attribute: DEFAULT), or
  ``("algorithm", lhs, rhs, accumulation)`` (the bf16 XLA attention's dots: bf16 inputs
  with float32 accumulation, the exact product of bf16 operands whatever the policy)."""
  if m := ALGO.search(line):
    return ("algorithm", *m.groups())
  return m.groups() if (m := PREC.search(line)) else ("DEFAULT", "DEFAULT")


def _train_step_dots(dtype: str) -> Counter:
  """The precision (``_kind``) of every dot of the train step (grad accumulation, global
  and local attention with attn_impl=auto, the chunked fused cross-entropy, AdamW with
  clipping), exported for cuda."""
  cfg = S.suite_config("tiny", dtype=dtype, grad_accum=2, batch_size=4, seq_len=32,
                       vocab_size=64, max_len=32, d_model=32, n_heads=2, window_size=8,
                       attention_layers=("global", "local"), loss_chunk=16)
  mesh = low.abstract_mesh((1, 1, 1))
  with jax.sharding.use_abstract_mesh(mesh):
    make, args = S.train_step(cfg, mesh)
    text = jax.export.export(make(), platforms=["cuda"])(*args).mlir_module()
  dots = [line for line in text.splitlines() if DOT.search(line)]
  assert len(dots) >= 30, len(dots)  # q, k, v, o, MLP, attention, head: fwd and bwd
  return Counter(_kind(line) for line in dots)


@pytest.mark.parametrize("dtype, want", [
    ("float32", {("HIGHEST", "HIGHEST")}),  # a float32 run on a GPU would otherwise use TF32
    ("bfloat16", {("DEFAULT", "DEFAULT"), ("algorithm", "bf16", "bf16", "f32")})])
def test_the_train_step_for_cuda_asks_float32_for_float32_only(dtype, want):
  got = _train_step_dots(dtype)
  assert set(got) == want, got


@pytest.mark.parametrize("dtype, want", [("float32", {("HIGHEST", "HIGHEST")}),
                                         ("bfloat16", {("DEFAULT", "DEFAULT")})])
def test_direct_chunked_loss_call_defaults_to_float32_meaning_float32(dtype, want):
  """``sbjax.losses.chunked_matrix_xent`` called from a user's own code (no config): its
  default precision "auto" asks HIGHEST for float32 operands, in the loss and its fused
  gradient, exported for cuda."""
  def loss(x, w, y):
    return losses.chunked_matrix_xent(x, w, y, 8)[0]

  x = jax.ShapeDtypeStruct((16, 8), jnp.dtype(dtype))
  w = jax.ShapeDtypeStruct((32, 8), jnp.dtype(dtype))
  y = jax.ShapeDtypeStruct((16,), jnp.int32)
  text = jax.export.export(jax.jit(jax.grad(loss, argnums=(0, 1))),
                           platforms=["cuda"])(x, w, y).mlir_module()
  dots = [line for line in text.splitlines() if DOT.search(line)]
  assert len(dots) >= 3
  assert {_kind(line) for line in dots} == want
