"""sbjax.attention: the Pallas splash kernel (interpret mode on CPU) against the einsum
reference, and what attn_impl=auto picks per backend."""

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import attention
from sbjax.config import ModelConfig

B, T, H, K = 1, 128, 2, 16  # splash tiles are 128 long: T is the smallest it takes


def qkv_do():
  return [jax.random.normal(x, (B, T, H, K), jnp.float32) for x in jax.random.split(
      jax.random.key(0), 4)]


def splash_vs_einsum(windows):
  """o = splash(q, k, v) in Pallas interpret mode; L = <o, dO>: L and dL/d(q, k, v) equal the
  einsum path to 1e-5 (float32) for each window (None = causal); returns the losses."""
  q, k, v, do = qkv_do()
  losses = {}
  # the interpret-mode program is large: keying it for the persistent compilation cache
  # (tests/conftest.py) costs more than compiling it
  cache_was = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  try:
    for window in windows:
      losses[window] = _one_window(q, k, v, do, window)
  finally:
    jax.config.update("jax_enable_compilation_cache", cache_was)
  return losses


def _one_window(q, k, v, do, window):
  vg = {}
  for name, fn in (("splash", attention.splash_attention),
                   ("einsum", attention.attention_reference)):
    f = lambda q, k, v, fn=fn: jnp.vdot(fn(q, k, v, scale=0.25, window=window), do)  # noqa: E731
    # LLVM -O0: a numerics check, and the interpret-mode program is large (compile ~30% less)
    vg[name] = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2))).lower(q, k, v).compile(
        {"xla_backend_optimization_level": 0})(q, k, v)
  (ls, gs), (le, ge) = vg["splash"], vg["einsum"]
  assert abs(float(ls) - float(le)) <= 1e-5 * max(1.0, abs(float(le)))
  for a, b in zip(gs, ge):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)
  return float(le)


@pytest.mark.only_on("cpu", "tpu", reason="the Pallas TPU kernel runs natively on a TPU and in "
                     "interpret mode on the CPU, not on a GPU")
def test_splash_interpret_equals_einsum_loss_and_grads_causal():
  """Causal here; the local window (GPT-Neo) in tests/e2e/test_lowering_e2e.py."""
  splash_vs_einsum([None])


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


def test_auto_on_gpu_says_which_kernel_in_the_log(caplog):
  attention._say.cache_clear()
  with caplog.at_level(logging.INFO, logger="sbjax"):
    with attention.assume_cudnn(False):
      assert attention.resolve(BF16, "gpu") == "xla"
    with attention.assume_cudnn(True):
      assert attention.resolve(BF16, "gpu") == "cudnn"
  text = caplog.text
  assert "cuDNN not used: assumed unavailable" in text and "cuDNN flash attention" in text


def test_cudnn_probe_on_this_cpu_machine_says_no_gpu():
  if jax.default_backend() != "cpu":
    pytest.skip("the probe is checked on a CPU-only machine")
  assert attention._probe_cudnn() == (False, "no GPU device")
