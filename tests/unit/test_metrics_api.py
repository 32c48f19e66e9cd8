"""sbjax.metrics' public surface: jit(vmap) equals the host loop, shape errors, docs, no side effects."""

import inspect
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import metrics as M

ROOT = Path(__file__).resolve().parents[2]
K, N, V, D = 8, 240, 12, 6


def _stack():
  """8 checkpoints whose classes tighten with the step; class 2 is missing in the last one."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, V, N)
  centres = rng.normal(size=(V, D)) * 2.0
  feats = np.stack([centres[labels] + (1.5 - 0.15 * k) * rng.normal(size=(N, D)) for k in range(K)])
  heads = np.stack([centres + (1.0 - 0.1 * k) * rng.normal(size=(V, D)) for k in range(K)])
  mask = np.ones((K, N), bool)
  mask[-1, labels == 2] = False
  return feats.astype(np.float32), labels, heads.astype(np.float32), mask


def test_jit_vmap_over_8_checkpoints_equals_the_host_loop():
  feats, labels, heads, mask = _stack()
  opts = M.CollapseOptions(min_count=2, block_size=8)
  dims = jnp.asarray([1, 3])

  def measure(h, w, m):
    return (M.spectrum_metrics(M.singular_values(w), d=dims), M.linear_cka(h, feats[-1]),
            M.neural_collapse(h, labels, w, h[:60], labels[:60], mask=m, options=opts))

  spec, cka, nc = jax.jit(jax.vmap(measure))(feats, heads, mask)
  assert nc.nc1_cdnv.shape == (K,) and spec.w_error.shape == (K, 2)
  np.testing.assert_array_equal(nc.n_classes, [V] * (K - 1) + [V - 1])
  for k in range(K):
    one = M.spectrum_metrics(M.singular_values(heads[k]), d=dims)
    for key, want in one._asdict().items():
      np.testing.assert_allclose(getattr(spec, key)[k], want, rtol=1e-6, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(cka[k], M.linear_cka(feats[k], feats[-1]), rtol=1e-6)
    m = mask[k]
    host = M.collapse_metrics(feats[k][m], labels[m], heads[k], feats[k][:60], labels[:60], options=opts)
    for key, want in host.to_dict().items():
      np.testing.assert_allclose(getattr(nc, key)[k], want, rtol=1e-6, atol=1e-6, err_msg=f"{k} {key}")
  assert len(set(np.asarray(nc.nc1_cdnv).tolist())) == K  # the checkpoints really differ


def _collapse_args():
  rng = np.random.default_rng(1)
  return rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 6, 20), rng.normal(size=(6, 4)).astype(np.float32)


H, Y, W = _collapse_args()
Z = np.zeros
WRONG = [  # (function, arguments, the argument blamed, its shape, the shape expected); traced by jax.jit
    (M.singular_values, (Z((3, 4, 5)),), "w", (3, 4, 5), "(V, d)"),
    (M.center_vocab, (Z(5),), "w", (5,), "(V, d)"),
    (M.kl_to_uniform, (Z((2, 3)),), "s", (2, 3), "(n,)"),
    (partial(M.w_error, d=1), (Z((2, 3)),), "s", (2, 3), "(n,)"),
    (M.spectrum_metrics, (Z((2, 3)),), "s", (2, 3), "(n,)"),
    (M.anisotropy, (Z((5, 3)), Z(4, bool)), "mask", (4,), "(N=5,)"),
    (M.anisotropy_by_layer, (Z((2, 5, 3)), Z((2, 5), bool)), "mask", (2, 5), "(N=5,)"),
    (M.linear_cka, (Z((6, 3)), Z((5, 3))), "y", (5, 3), "(n=6, d2)"),
    (M.cka_to_reference, (Z((2, 6, 3)), Z((5, 3))), "ref", (5, 3), "(n=6, d2)"),
    (M.cka_to_reference_by_layer, (Z((2, 3, 6, 4)), Z((2, 6, 4))), "ref", (2, 6, 4), "(L=3, n=6, d2)"),
    (M.neural_collapse, (H, Y, W.T), "w", (4, 6), "(V, d=4)"),  # a transposed head: w is blamed
    (M.neural_collapse, (H, Y[:-1], W), "labels", (19,), "(N=20,)"),
    (M.neural_collapse, (H, Y, W, H[:, :2], Y), "val_feats", (20, 2), "(M, d=4)"),
    (M.neural_collapse_from_stats, (W, Z(5), Z(6, int), W), "variances", (5,), "(V=6,)"),
    (lambda h, y: M.mean_update(M.mean_init(6, 4), h, y), (H[:, :3], Y), "feats", (20, 3), "(B, d=4)"),
]


@pytest.mark.parametrize("fn,args,name,got,expected", WRONG, ids=[f"{i}-{c[2]}" for i, c in enumerate(WRONG)])
def test_a_wrong_shape_raises_one_value_error_naming_the_argument(fn, args, name, got, expected):
  with pytest.raises(ValueError) as e:
    jax.jit(fn)(*args)
  msg = str(e.value)
  assert f": {name} has shape {got}, expected {expected}" in msg and "\n" not in msg, msg
  assert e.value.__cause__ is None and e.value.__context__ is None


def test_wrong_dtype_and_options_raise_one_value_error_too():
  with pytest.raises(ValueError, match=r"neural_collapse: labels has dtype float32, expected an integer dtype"):
    M.neural_collapse(H, Y.astype(np.float32), W)
  with pytest.raises(ValueError, match=r"CollapseOptions: norm_variant must be one of \('norm', 'squared'\)"):
    M.CollapseOptions(norm_variant="l2")
  with pytest.raises(ValueError, match=r"linear_cka\(debiased=True\) needs at least 4 samples, got n=3"):
    M.linear_cka(np.ones((3, 2)), np.ones((3, 2)), debiased=True)
  with pytest.raises(TypeError, match=r"collapse_metrics .*cannot be traced.*use sbjax.metrics.neural_collapse there"):
    jax.jit(M.collapse_metrics)(H, Y, W)


def test_every_exported_name_is_a_documented_function_or_a_type():
  assert len(set(M.__all__)) == len(M.__all__)
  for name in M.__all__:
    obj = getattr(M, name)
    assert inspect.isfunction(obj) or inspect.isclass(obj), (name, obj)
    assert obj.__doc__, name
    if inspect.isfunction(obj):
      assert "\n  Args:\n" in obj.__doc__ and "\n  Returns:\n" in obj.__doc__, name
  modules = {n for n in vars(M) if inspect.ismodule(getattr(M, n))}
  assert all(n.startswith("_") for n in modules) and not modules & set(M.__all__), modules


_SNAPSHOT = r"""
import ast, importlib, json, logging, pathlib, sys
import absl.logging
import jax
from jax._src.interpreters import ad, batching, mlir

# first the third-party modules that sbjax.metrics imports (JAX registers its own primitives
# when some of its modules load, e.g. jax.extend.core): what changes after is sbjax's doing
files = [*pathlib.Path("sbjax/metrics").glob("*.py"), pathlib.Path("sbjax/per_platform.py")]
for node in (n for f in files for n in ast.parse(f.read_text()).body):
  if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
    for name in [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]:
      if not name.startswith(("sbjax", "__future__")):
        importlib.import_module(name)

def state():
  def logger(lg):
    return [lg.level, [repr(h) for h in lg.handlers], [repr(f) for f in lg.filters], lg.propagate, lg.disabled]
  loggers = {n: logger(lg) for n, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
  absl_logger = absl.logging.get_absl_logger()
  return {"root": logger(logging.getLogger()), "loggers": loggers, "absl_verbosity": absl.logging.get_verbosity(),
          "absl": logger(absl_logger), "absl_handler": [repr(f) for f in absl.logging.get_absl_handler().filters],
          "lowerings": sorted(str(p) for p in mlir._lowerings),
          "platform_lowerings": {k: sorted(str(p) for p in v) for k, v in mlir._platform_specific_lowerings.items()},
          "batchers": sorted(str(p) for p in batching.fancy_primitive_batchers),
          "jvps": sorted(str(p) for p in ad.primitive_jvps),
          "config": {k: repr(v) for k, v in jax.config.values.items()}}

before = state()
import sbjax.metrics
after = state()
sbjax.metrics.singular_values(jax.numpy.ones((4, 3)))  # first use: the eigenvalue primitive
used = state()
print(json.dumps([before, after, used]))
"""


def test_import_changes_no_logging_and_registers_nothing_with_jax():
  env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-c", _SNAPSHOT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300, check=True).stdout
  before, after, used = json.loads(out.strip().splitlines()[-1])
  new = set(after["loggers"]) - set(before["loggers"])  # modules' own getLogger(__name__): defaults
  assert all(after["loggers"][n][:3] == [0, [], []] for n in new), {n: after["loggers"][n] for n in new}
  after["loggers"] = {n: v for n, v in after["loggers"].items() if n not in new}
  assert after == before
  # the check sees a registration: the first call registers the spectrum's primitive
  assert "sbjax_spectrum_eigvalsh" in used["lowerings"] and "sbjax_spectrum_eigvalsh" not in after["lowerings"]
