"""The lowering suite (``sbjax.lowering_suite``; the full matrix of presets and meshes:
``python -m sbjax.lowering_suite``): a tiny GPT-Neo-like model (global and local layers) in
bf16 with float32 parameters, every entry point exported once for cpu, cuda and tpu together
on the (1, 4, 2) mesh; and what a function that does not lower raises."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import lowering as low
from sbjax import lowering_suite as S


@pytest.mark.parametrize("entry", list(S.ENTRIES))
def test_every_entry_point_exports_once_for_cpu_cuda_and_tpu(entry):
  cfg = S.suite_config("tiny", grad_accum=2, batch_size=8, seq_len=128, vocab_size=64,
                       max_len=128, d_model=32, n_heads=2, attention_layers=("global", "local"),
                       window_size=32)
  row = S.lower_entry(entry, cfg, (1, 4, 2))
  assert row["platforms"] == ["cpu", "cuda", "tpu"] and row["devices"] == 8, row
  if entry == "weight_metrics":  # the eigenvalue routine of each platform
    assert {"lapack_ssytrd_ffi", "cusolver_syevd_ffi", "Eigh"} <= set(row["custom_calls"]), row


def test_a_function_that_does_not_lower_is_named():
  def f(x):  # a host callback: no multi-platform lowering
    return jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

  x = jax.ShapeDtypeStruct((4, 4), jnp.float32)
  with pytest.raises(low.LoweringError, match=r"^f does not lower for cpu,cuda,tpu: "
                     r"NotImplementedError: .*python_callback"):
    low.export_checked(lambda: jax.jit(f), (x,), name="f")
