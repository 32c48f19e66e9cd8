"""sbjax.attention: the Pallas splash kernel (interpret mode on CPU) against the einsum
reference; what attn_impl=auto picks per backend, staged as one program whose kernel each
backend picks when it compiles (here: equal to the einsum kernel); the precision policy in
the einsum and XLA kernels."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import attention
from sbjax.config import ModelConfig

B, T, H, K = 1, 128, 2, 16  # splash tiles are 128 long: T is the smallest it takes


@pytest.mark.only_on("cpu", "tpu", reason="the Pallas TPU kernel runs natively on a TPU and in "
                     "interpret mode on the CPU, not on a GPU")
@pytest.mark.parametrize("window", [None, pytest.param(32, marks=pytest.mark.e2e)])
def test_splash_interpret_equals_einsum_loss_and_grads(window):
  """o = splash(q, k, v) in Pallas interpret mode, L = <o, dO>: L and dL/d(q, k, v) equal the
  einsum path to 1e-5 (float32), causal and with GPT-Neo's local window (slow: the e2e layer)."""
  q, k, v, do = [jax.random.normal(x, (B, T, H, K), jnp.float32)
                 for x in jax.random.split(jax.random.key(0), 4)]
  vg = {}
  # the interpret-mode program is large: keying it for the persistent compilation cache
  # (tests/conftest.py) costs more than compiling it; LLVM -O0 compiles it ~30% faster
  cache_was = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  try:
    for name, fn in (("splash", attention.splash_attention),
                     ("einsum", attention.attention_reference)):
      f = lambda q, k, v, fn=fn: jnp.vdot(fn(q, k, v, scale=0.25, window=window), do)  # noqa
      vg[name] = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2))).lower(q, k, v).compile(
          {"xla_backend_optimization_level": 0})(q, k, v)
  finally:
    jax.config.update("jax_enable_compilation_cache", cache_was)
  (ls, gs), (le, ge) = vg["splash"], vg["einsum"]
  assert abs(float(ls) - float(le)) <= 1e-5 * max(1.0, abs(float(le)))
  for a, b in zip(gs, ge):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_splash_refuses_a_sequence_the_tiles_do_not_divide():
  x = jnp.zeros((1, 96, 1, 8))
  with pytest.raises(ValueError, match="multiple of 128, got 96"):
    attention.splash_attention(x, x, x, scale=1.0, window=None)


BF16 = ModelConfig(vocab_size=64, d_model=128, n_heads=2, dtype="bfloat16")  # head_dim 64


@pytest.mark.parametrize("cfg, backend, cudnn, want", [
    (BF16, "cpu", True, "einsum"),
    (BF16, "gpu", True, "cudnn"),
    (BF16, "gpu", False, "xla"),  # no usable cuDNN: falls back, no error
    (dataclasses.replace(BF16, dtype="float32"), "gpu", True, "xla"),  # cuDNN needs bf16/f16
    (ModelConfig(vocab_size=64, d_model=144, n_heads=1, dtype="bfloat16"), "gpu", True, "xla"),
    (BF16, "tpu", True, "xla"),
    (dataclasses.replace(BF16, attn_impl="splash"), "tpu", True, "splash"),
    (dataclasses.replace(BF16, attn_impl="dpa"), "gpu", True, "dpa"),
    (dataclasses.replace(BF16, attn_impl="splash", dtype="float64", param_dtype="float64"),
     "tpu", True, "einsum"),
])
def test_auto_choice(cfg, backend, cudnn, want):
  with attention.assume_cudnn(cudnn):
    assert attention.resolve(cfg, backend) == want


CFG = ModelConfig(vocab_size=64, d_model=32, n_heads=2, dtype="float32")


def _qkv(t=16, dtype=jnp.float32):
  ks = jax.random.split(jax.random.key(0), 3)
  return [jax.random.normal(k, (2, t, 2, 16), dtype) for k in ks]


def _attend(cfg, local=False):
  return jax.jit(lambda q, k, v: attention.attend(cfg, q, k, v, scale=0.25, local=local))


def _prims(fn, *args) -> set[str]:
  """The primitives of ``fn``'s jaxpr, nested ones included."""
  return set(re.findall(r"\b([a-z_]+)\[", str(jax.make_jaxpr(fn)(*args))))


def test_auto_stages_each_platforms_kernel_and_equals_einsum_here():
  q, k, v = _qkv()
  assert attention.platform_kernels(CFG) == {"cpu": "einsum", "cuda": "xla", "default": "xla"}
  assert {"platform_index", "cond"} <= _prims(_attend(CFG), q, k, v)
  einsum = dataclasses.replace(CFG, attn_impl="einsum")
  assert "cond" not in _prims(_attend(einsum), q, k, v)  # a named kernel: no choice staged
  for local in (False, True):
    got = _attend(dataclasses.replace(CFG, window_size=4), local)(q, k, v)
    want = _attend(dataclasses.replace(einsum, window_size=4), local)(q, k, v)
    np.testing.assert_array_equal(got, want)

  def grads(cfg):
    f = lambda q, k, v: attention.attend(cfg, q, k, v, scale=0.25, local=False).sum()  # noqa
    return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)

  for a, b in zip(grads(CFG), grads(einsum)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("impl", ["einsum", "dpa"])
@pytest.mark.parametrize("dtype, name, want", [("float32", "auto", "HIGHEST"),
                                               ("float32", "high", "HIGH"),
                                               ("bfloat16", "auto", "DEFAULT")])
def test_precision_reaches_the_einsum_and_xla_kernels(impl, dtype, name, want):
  cfg = dataclasses.replace(CFG, attn_impl=impl, matmul_precision=name, dtype=dtype)
  text = _attend(cfg).lower(*_qkv(dtype=jnp.dtype(dtype))).as_text()
  dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
  got = {m.group(1) if (m := re.search(r"precision = \[(\w+), \1\]", d)) else None for d in dots}
  assert len(dots) == 2 and got == {want}, dots
