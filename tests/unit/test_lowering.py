"""sbjax.lowering on small functions: what a failure names (host callback, float64 on TPU, a
primitive with no TPU lowering, a sharding that does not divide), and which trace-time path
(CPU or accelerator) is exported for each platform."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from sbjax import lowering as low
from sbjax.metrics import spectrum

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

  for platform in low.PLATFORMS:
    with pytest.raises(low.LoweringError) as e:
      low.export_checked(lambda: jax.jit(f), (X,), platform, "f")
    msg = str(e.value)
    assert f"f does not lower for {platform}" in msg
    assert f"host callback '{kind}'" in msg and "test_lowering.py:" in msg, msg


def test_float64_under_x64_is_named_for_tpu_only():
  def f(x):
    return jnp.sum(x.astype(jnp.float64) ** 2)

  with jax.enable_x64(True):
    with pytest.raises(low.LoweringError, match=r"float64 value from 'convert_element_type' at "
                       r".*test_lowering.py:\d+.*TPU has no float64"):
      low.export_checked(lambda: jax.jit(f), (X,), "tpu", "f")
    low.export_checked(lambda: jax.jit(f), (X,), "cuda", "f")  # GPUs have float64


def test_primitive_without_tpu_lowering_is_named():
  def f(x):
    g = x.T @ x
    _, d, _, _ = lax.linalg.tridiagonal(g, lower=True)
    return d

  with pytest.raises(low.LoweringError, match=r"primitive 'tridiagonal' at .*test_lowering.py:\d+"
                     r".* has no lowering: the LAPACK/cuSOLVER sytrd"):
    low.export_checked(lambda: jax.jit(f), (X,), "tpu", "f")
  assert "cusolver_sytrd_ffi" in low.custom_calls(low.export_checked(lambda: jax.jit(f), (X,),
                                                                     "cuda"))


def test_sharding_that_does_not_divide_is_named():
  mesh = low.abstract_mesh((4, 1, 2))
  x = jax.ShapeDtypeStruct((6, 16), jnp.float32, sharding=NamedSharding(mesh, P("data")))
  with jax.sharding.use_abstract_mesh(mesh):
    with pytest.raises(low.LoweringError, match=r"IndivisibleError: .*partitioned 4 times, but the dimension size is 6"):
      low.export_checked(lambda: jax.jit(jnp.sum), (x,), "tpu", "sum")


@pytest.mark.parametrize("platform, target, absent", [
    ("cpu", "lapack_ssytrd_ffi", "syevd"),  # the CPU path: tridiagonal + bisection
    ("tpu", "Eigh", "sytrd"),                # the accelerator path: eigvalsh
    ("cuda", "cusolver_syevd_ffi", "sytrd"),
])
def test_spectra_export_the_path_of_the_target_platform(platform, target, absent):
  """singular_values picks its eigen routine with jax.default_backend() at trace time: the
  export for a platform takes that platform's path, not this CPU's."""
  w = jax.ShapeDtypeStruct((512, 256), jnp.float32)  # d >= 256: the CPU Gram trick too
  exp = low.export_checked(lambda: jax.jit(spectrum.singular_values), (w,), platform, "sv")
  calls = low.custom_calls(exp)
  assert target in calls and not any(absent in c for c in calls), calls
  # the CPU's half-Gram product (a concatenate of the block rows) only on cpu
  n_concat = len(re.findall(r"stablehlo.concatenate", exp.mlir_module()))
  assert (n_concat > 0) == (platform == "cpu")


def test_target_backend_is_restored():
  before = jax.default_backend()
  with pytest.raises(RuntimeError):
    with low.target_backend("tpu"):
      assert jax.default_backend() == "tpu"
      raise RuntimeError("boom")
  assert jax.default_backend() == before
  with pytest.raises(ValueError, match="unknown platform 'tpux'"):
    with low.target_backend("tpux"):
      pass
