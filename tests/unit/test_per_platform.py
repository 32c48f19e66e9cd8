"""sbjax.per_platform: one lowering per platform where lax.platform_dependent cannot export."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from sbjax.per_platform import per_platform_op

# cpu: x·2 + y; every other platform: x·3 + y (each a lax primitive, easy to tell apart)
F = per_platform_op("sbjax_test_scale", lambda x, y: x * 3.0 + y, cpu=lambda x, y: x * 2.0 + y)
X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.ones(3, np.float32)


def test_this_cpu_runs_the_cpu_rule_eager_jitted_and_vmapped():
  want = X * 2 + Y
  np.testing.assert_array_equal(F(X, Y), want)
  np.testing.assert_array_equal(jax.jit(F)(X, Y), want)
  # the batch axis moved first, the unbatched y broadcast along it
  np.testing.assert_array_equal(jax.vmap(F, in_axes=(1, None))(X, Y[:2]), (X * 2).T + Y[:2])
  assert per_platform_op("sbjax_test_scale", jnp.sin) is F  # one primitive per name


def test_one_export_holds_each_platforms_rule_and_a_tpu_only_gap_is_not_hit():
  """The cpu rule uses a primitive with no TPU lowering (tridiagonal); the export for
  (cpu, cuda, tpu) still works because each rule is lowered for its own platforms only,
  whereas the same branch inside lax.platform_dependent fails (JAX 0.10)."""
  def cpu(g):
    return lax.linalg.tridiagonal(g, lower=True)[1]

  def other(g):
    return jnp.diagonal(g, axis1=-2, axis2=-1)

  g = jax.ShapeDtypeStruct((8, 8), jnp.float32)
  f = per_platform_op("sbjax_test_tridiag", other, cpu=cpu)
  exp = jax.export.export(jax.jit(f), platforms=["cpu", "cuda", "tpu"])(g)
  calls = set(re.findall(r"custom_call @([\w$.\-]+)", exp.mlir_module()))
  assert "lapack_ssytrd_ffi" in calls and not any("sytrd" in c and "lapack" not in c
                                                  for c in calls), calls
  a = np.diag(np.arange(8, dtype=np.float32))
  np.testing.assert_array_equal(exp.call(a), np.arange(8, dtype=np.float32))
  with pytest.raises(NotImplementedError, match="'tridiagonal' not found for platforms"):
    jax.export.export(jax.jit(lambda g: lax.platform_dependent(g, cpu=cpu, default=other)),
                      platforms=["cpu", "cuda", "tpu"])(g)
