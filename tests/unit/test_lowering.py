"""sbjax.lowering on small functions: what a failure names (host callback, float64 on TPU, a
primitive with no TPU lowering, a sharding that does not divide, an unknown platform). (The
real entry points, each exported once for cpu, cuda and tpu: test_lowering_suite.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from sbjax import lowering as low

X = jax.ShapeDtypeStruct((64, 16), jnp.float32)


def _host_double(a):
  return np.asarray(a) * 2


@pytest.mark.parametrize("kind", ["pure_callback", "debug_print"])
def test_host_callback_is_named_with_its_source_line(kind):
  def f(x):
    if kind == "pure_callback":
      x = jax.pure_callback(_host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    else:
      jax.debug.print("x0={}", x[0, 0])
    return jnp.sum(x * x)

  for platforms in (low.PLATFORMS, ("cuda",)):
    with pytest.raises(low.LoweringError) as e:
      low.export_checked(lambda: jax.jit(f), (X,), platforms, "f")
    msg = str(e.value)
    assert f"f does not lower for {','.join(platforms)}" in msg
    assert f"host callback '{kind}'" in msg and "test_lowering.py:" in msg, msg


def test_float64_under_x64_is_named_for_tpu_only():
  def f(x):
    return jnp.sum(x.astype(jnp.float64) ** 2)

  with jax.enable_x64(True):
    with pytest.raises(low.LoweringError, match=r"float64 value from 'convert_element_type' at "
                       r".*test_lowering.py:\d+.*TPU has no float64"):
      low.export_checked(lambda: jax.jit(f), (X,), low.PLATFORMS, "f")
    low.export_checked(lambda: jax.jit(f), (X,), ("cpu", "cuda"), "f")  # both have float64


def test_primitive_without_tpu_lowering_is_named():
  def f(x):
    g = x.T @ x
    _, d, _, _ = lax.linalg.tridiagonal(g, lower=True)
    return d

  with pytest.raises(low.LoweringError, match=r"primitive 'tridiagonal' at .*test_lowering.py:\d+"
                     r".* has no lowering \(platforms \['tpu'\]\): the LAPACK/cuSOLVER sytrd"):
    low.export_checked(lambda: jax.jit(f), (X,), low.PLATFORMS, "f")
  calls = low.custom_calls(low.export_checked(lambda: jax.jit(f), (X,), ("cpu", "cuda")))
  assert "cusolver_sytrd_ffi" in calls and "lapack_ssytrd_ffi" in calls, calls


def test_sharding_that_does_not_divide_is_named():
  mesh = low.abstract_mesh((4, 1, 2))
  x = jax.ShapeDtypeStruct((6, 16), jnp.float32, sharding=NamedSharding(mesh, P("data")))
  with jax.sharding.use_abstract_mesh(mesh):
    with pytest.raises(low.LoweringError, match=r"IndivisibleError: .*partitioned 4 times, but the dimension size is 6"):
      low.export_checked(lambda: jax.jit(jnp.sum), (x,), low.PLATFORMS, "sum")


def test_unknown_platform_is_refused():
  with pytest.raises(ValueError, match=r"unknown platforms \['tpux'\]; allowed: a non-empty "
                     r"subset of \('cpu', 'cuda', 'rocm', 'tpu'\)"):
    low.export_checked(lambda: jax.jit(jnp.sum), (X,), ("cpu", "tpux"), "sum")
