"""The lowering suite's fast part (``sbjax.lowering_suite``; the rest is in
tests/e2e/test_lowering_e2e.py and ``python -m sbjax.lowering_suite``): a tiny GPT-Neo-like
model (global and local layers) in bf16 with float32 parameters on the (2, 2, 2) mesh."""

import jax.numpy as jnp
import pytest

from sbjax import lowering_suite as S


def tiny(attn_impl: str, **kw):
  """Tiny shapes that still shard on every mesh of the suite (8 devices, tensor <= 2)."""
  model = dict(vocab_size=64, max_len=128, d_model=32, n_heads=2,
               attention_layers=("global", "local"), window_size=32)
  model.update(kw)
  return S.suite_config("tiny", attn_impl=attn_impl, grad_accum=2, batch_size=8, seq_len=128,
                        **model)


def test_train_step_with_accumulation_lowers_for_tpu_with_splash_sharded():
  cfg = tiny("splash")
  row = S.lower_entry("train_step", cfg, (2, 2, 2), "tpu")
  assert row["devices"] == 8 and "tpu_custom_call" in row["custom_calls"], row
  assert cfg.model.param_dtype == "float32" and cfg.model.dtype == "bfloat16"


def test_attention_auto_exports_cudnn_for_cuda_and_splash_for_tpu():
  """attn_impl=auto on a GPU takes cuDNN (forward and backward kernels, causal and local);
  attn_impl=splash on TPU takes the Pallas kernel (a Mosaic tpu_custom_call)."""
  cuda = S.lower_entry("attention", tiny("auto"), (2, 2, 2), "cuda")["custom_calls"]
  assert "__cudnn$fmhaSoftmax" in cuda and "__cudnn$fmhaSoftmaxBackward" in cuda, cuda
  assert "tpu_custom_call" in S.lower_entry("attention", tiny("splash"), (2, 2, 2),
                                            "tpu")["custom_calls"]


def test_a_batch_the_mesh_does_not_divide_is_refused_before_lowering():
  cfg = S.suite_config("tiny", batch_size=6, grad_accum=1, seq_len=32)
  with pytest.raises(ValueError, match="global batch 6 is not divisible by the data-parallel "
                     "size data\\*fsdp=4"):
    S.lower_entry("eval_step", cfg, (2, 2, 2), "tpu")
  assert jnp.dtype(cfg.model.dtype) == jnp.bfloat16
