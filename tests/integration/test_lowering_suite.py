"""The lowering suite's fast part (``sbjax.lowering_suite``; the full matrix of presets and
meshes: ``python -m sbjax.lowering_suite``): a tiny GPT-Neo-like model (global and local
layers) in bf16 with float32 parameters: every entry point exported once for cpu, cuda and
tpu together on the (1, 4, 2) mesh, and the kernels that lower on one platform only on the
(2, 2, 2) mesh."""

import jax.numpy as jnp
import pytest

from sbjax import lowering as low
from sbjax import lowering_suite as S


def tiny(attn_impl: str, **kw):
  """Tiny shapes that still shard on every mesh of the suite (8 devices, tensor <= 2)."""
  model = dict(vocab_size=64, max_len=128, d_model=32, n_heads=2,
               attention_layers=("global", "local"), window_size=32)
  model.update(kw)
  return S.suite_config("tiny", attn_impl=attn_impl, grad_accum=2, batch_size=8, seq_len=128,
                        **model)


@pytest.mark.parametrize("entry", list(S.ENTRIES))
def test_every_entry_point_exports_once_for_cpu_cuda_and_tpu(entry):
  """One ``jax.export(..., platforms=("cpu", "cuda", "tpu"))`` per entry point, from this
  CPU host, with no target-backend setting: each platform's choices are in the module."""
  row = S.lower_entry(entry, tiny("auto"), (1, 4, 2), low.PLATFORMS)
  assert row["platforms"] == ["cpu", "cuda", "tpu"], row
  assert row["devices"] == (1 if entry in S.UNSHARDED else 8), row
  if entry == "weight_metrics":  # the eigenvalue routine of each platform
    assert {"lapack_ssytrd_ffi", "cusolver_syevd_ffi", "Eigh"} <= set(row["custom_calls"]), row


def test_train_step_with_accumulation_lowers_for_tpu_with_splash_sharded():
  """splash compiled for TPU lowers on TPU only: the export narrows to tpu by itself."""
  cfg = tiny("splash")
  row = S.lower_entry("train_step", cfg, (2, 2, 2))
  assert row["platforms"] == ["tpu"], row
  assert row["devices"] == 8 and "tpu_custom_call" in row["custom_calls"], row
  assert cfg.model.param_dtype == "float32" and cfg.model.dtype == "bfloat16"


def test_attention_kernels_one_export_for_auto_one_platform_for_cudnn_and_splash():
  """attn_impl=auto: one export for cpu, cuda and tpu (einsum on cpu, XLA's kernel on cuda
  traced off a GPU and on tpu); cudnn: cuda only, forward and backward kernels, causal and
  local; splash: tpu only (a Mosaic tpu_custom_call)."""
  auto = S.lower_entry("attention", tiny("auto"), (2, 2, 2))
  assert auto["platforms"] == ["cpu", "cuda", "tpu"], auto
  assert not any("cudnn" in c or c == "tpu_custom_call" for c in auto["custom_calls"]), auto
  cudnn = S.lower_entry("attention", tiny("cudnn"), (2, 2, 2))
  assert cudnn["platforms"] == ["cuda"], cudnn
  assert {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"} <= set(cudnn["custom_calls"])
  splash = S.lower_entry("attention", tiny("splash"), (2, 2, 2))
  assert splash["platforms"] == ["tpu"] and "tpu_custom_call" in splash["custom_calls"]


def test_a_kernel_that_cannot_serve_the_platforms_asked_is_refused():
  with pytest.raises(ValueError, match=r"attention with model.attn_impl=splash exports only for "
                     r"\['tpu'\], not for \['cpu', 'cuda'\]; pass --platforms=tpu"):
    S.lower_entry("attention", tiny("splash"), (2, 2, 2), ("cpu", "cuda"))


def test_a_batch_the_mesh_does_not_divide_is_refused_before_lowering():
  cfg = S.suite_config("tiny", batch_size=6, grad_accum=1, seq_len=32)
  with pytest.raises(ValueError, match="global batch 6 is not divisible by the data-parallel "
                     "size data\\*fsdp=4"):
    S.lower_entry("eval_step", cfg, (2, 2, 2))
  assert jnp.dtype(cfg.model.dtype) == jnp.bfloat16
