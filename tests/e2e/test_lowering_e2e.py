"""The lowering suite beyond the fast layer (where every entry point is exported once for cpu,
cuda and tpu together): a pythia-160m train step with splash for tpu on the (8, 1, 1) mesh,
and splash attention with a local window in interpret mode. The full matrix
(pythia-160m and -410m, meshes 8x1x1, 2x2x2, 1x4x2 and 4x4x2): ``python -m
sbjax.lowering_suite`` (BUILD_NOTES.md)."""

import jax.numpy as jnp

from sbjax import attention
from sbjax import lowering_suite as S
from tests.unit.test_attention import qkv_do, splash_vs_einsum


def test_pythia_160m_train_step_lowers_for_tpu_in_bf16_with_f32_params():
  """With splash attention at seq_len 2048 (cuda and pythia-410m: the CLI). Two of its 12
  layers: the layers are identical, tracing them is most of the time (~0.35 s each), and
  the CLI matrix exports all 12."""
  full = S.suite_config("pythia-160m", attn_impl="splash", grad_accum=4, batch_size=32)
  assert (full.model.dtype, full.model.param_dtype) == ("bfloat16", "float32")
  assert full.model.n_layers == 12 and full.train.seq_len == 2048
  cfg = S.suite_config("pythia-160m", attn_impl="splash", grad_accum=4, batch_size=32,
                       n_layers=2)
  row = S.lower_entry("train_step", cfg, (8, 1, 1))
  assert row["platforms"] == ["tpu"], row
  assert row["devices"] == 8 and "tpu_custom_call" in row["custom_calls"], row


def test_splash_interpret_equals_einsum_local_window():
  local = splash_vs_einsum([32])[32]
  q, k, v, do = qkv_do()
  causal = float(jnp.vdot(attention.attention_reference(q, k, v, scale=0.25, window=None), do))
  assert abs(local - causal) > 1e-2  # the masks differ: the test tells them apart
