"""sbjax.attention per platform: ``attn_impl=auto`` is one program whose kernel each backend
picks when it compiles (``lax.platform_dependent``), equal on this CPU to the einsum kernel;
a named kernel is one kernel everywhere; the precision policy reaches the einsum and XLA
kernels (``model.matmul_precision``)."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import attention
from sbjax.lowering import iter_eqns
from sbjax.config import ModelConfig

CFG = ModelConfig(vocab_size=64, d_model=32, n_heads=2, dtype="float32")


def _qkv(t=16, dtype=jnp.float32):
  ks = jax.random.split(jax.random.key(0), 3)
  return [jax.random.normal(k, (2, t, 2, 16), dtype) for k in ks]


def _attend(cfg, local=False):
  return jax.jit(lambda q, k, v: attention.attend(cfg, q, k, v, scale=0.25, local=local))


def _prims(fn, *args) -> set[str]:
  return {e.primitive.name for e in iter_eqns(jax.make_jaxpr(fn)(*args))}


def test_auto_stages_each_platforms_kernel_and_equals_einsum_here():
  q, k, v = _qkv()
  assert attention.platform_kernels(CFG) == {"cpu": "einsum", "cuda": "xla", "default": "xla"}
  assert {"platform_index", "cond"} <= _prims(_attend(CFG), q, k, v)
  einsum = dataclasses.replace(CFG, attn_impl="einsum")
  assert "cond" not in _prims(_attend(einsum), q, k, v)  # a named kernel: no choice staged
  for local in (False, True):
    got = _attend(dataclasses.replace(CFG, window_size=4), local)(q, k, v)
    want = _attend(dataclasses.replace(einsum, window_size=4), local)(q, k, v)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_auto_gradients_equal_einsum_here():
  q, k, v = _qkv()

  def grads(cfg):
    f = lambda q, k, v: attention.attend(cfg, q, k, v, scale=0.25, local=False).sum()  # noqa
    return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)

  for a, b in zip(grads(CFG), grads(dataclasses.replace(CFG, attn_impl="einsum"))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("impl", ["einsum", "dpa"])
@pytest.mark.parametrize("name, want", [("auto", "HIGHEST"), ("high", "HIGH")])
def test_precision_reaches_the_einsum_and_xla_kernels(impl, name, want):
  cfg = dataclasses.replace(CFG, attn_impl=impl, matmul_precision=name)
  q, k, v = _qkv()
  text = _attend(cfg).lower(q, k, v).as_text()
  dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
  assert len(dots) == 2, dots
  assert all(re.search(rf"precision = \[{want}, {want}\]", d) for d in dots), dots


def test_bf16_auto_sets_no_precision():
  cfg = dataclasses.replace(CFG, dtype="bfloat16", attn_impl="einsum")
  text = _attend(cfg).lower(*_qkv(dtype=jnp.bfloat16)).as_text()
  dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
  assert len(dots) == 2 and not any(re.search(r"precision = \[HIGH", d) for d in dots), dots
