"""The lowering suite: every jitted entry point of sbjax exported once for CPU, CUDA and TPU
(one ``jax.export`` with ``platforms=("cpu", "cuda", "tpu")``, ``sbjax.lowering``) on an
abstract (data, fsdp, tensor) mesh, with the shardings the runs use. No accelerator needed.

Entry points (``ENTRIES``: ``(cfg, mesh) -> (make_jit, args)``): the run's train step (with
``train.grad_accum``) for one run and for 2 members, the eval step, the analysis's grouped
forward and weight metrics over 2 stacked checkpoints, the collapse passes and CKA by layer.
Attention is ``attn_impl=auto``, its cuda branch traced as XLA's kernel (sharded cuDNN
attention cannot be exported: its partitioner is a host callback).

    python -m sbjax.lowering_suite --configs=pythia-160m,pythia-410m \
        --meshes=8x1x1,2x2x2,1x4x2,4x4x2 [--platforms=cpu,cuda,tpu] [--dtype=bfloat16]

Each row (one entry, config and mesh) is printed as JSON; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import jax
import jax.numpy as jnp

from sbjax import attention, configs
from sbjax import lowering as low
from sbjax import metrics as M
from sbjax import sharding as shd
from sbjax.analysis import forward
from sbjax.analysis.settings import Settings
from sbjax.config import Config
from sbjax.metrics import _collapse_core
from sbjax.model import Model
from sbjax.train import build as train_build
from sbjax.train.members import Varies
from sbjax.train.step import TrainState

N_MEMBERS, N_CKPT = 2, 2


def suite_config(name: str, *, dtype: str = "bfloat16", grad_accum: int = 4,
                 batch_size: int = 0, seq_len: int = 0, **model) -> Config:
  """The named config ``name`` for lowering: ``dtype`` compute, float32 params, an
  accumulating step; batch/seq default to the config's own; ``model`` overrides fields."""
  cfg = configs.get(name)
  tc = cfg.train
  return cfg.replace(
      model=dataclasses.replace(cfg.model, dtype=dtype, param_dtype="float32", **model),
      train=dataclasses.replace(tc, grad_accum=grad_accum, batch_size=batch_size or tc.batch_size,
                                seq_len=seq_len or tc.seq_len))


def _repl(mesh, tree):
  return low.sds(tree, jax.tree.map(lambda _: shd.replicated(mesh), tree))


def _batch(cfg: Config, mesh, extra: int = 1):
  return jax.ShapeDtypeStruct((cfg.train.batch_size, cfg.train.seq_len + extra), jnp.int32,
                              sharding=shd.batch_sharding(mesh))


def _stacked(tree, n: int):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct((n,) + x.shape, x.dtype), tree)


def _step(cfg: Config, mesh, n: int):
  """The jitted step of a run of ``n`` members (``sbjax.train.build``) and its arguments."""
  fns = train_build.build(cfg, mesh, -1, n, Varies(False, n > 1, False))
  p, o = (fns.abstract, fns.abstract_opt) if n == 1 else (_stacked(fns.abstract, n),
                                                          _stacked(fns.abstract_opt, n))
  state = TrainState(jax.ShapeDtypeStruct((), jnp.int32, sharding=fns.repl),
                     low.sds(p, fns.p_sh), low.sds(o, fns.o_sh))
  per_member = (jax.ShapeDtypeStruct((n,), jnp.float32, sharding=fns.repl),) * 2 if n > 1 else ()
  return (lambda: fns.step), (state, _batch(cfg, mesh), *per_member)


def train_step(cfg: Config, mesh):
  return _step(cfg, mesh, 1)


def population_step(cfg: Config, mesh):
  return _step(cfg, mesh, N_MEMBERS)


def eval_step(cfg: Config, mesh):
  fns = train_build.build(cfg, mesh, -1)
  return (lambda: fns.eval), (low.sds(fns.abstract, fns.p_sh), _batch(cfg, mesh))


def _stacked_params(cfg: Config, mesh):
  p = _stacked(Model(cfg.model).abstract_params(cfg.train.seq_len), N_CKPT)
  return low.sds(p, shd.tree_shardings(p, mesh, 1))


def analysis_forward(cfg: Config, mesh):
  n = cfg.train.batch_size
  take = (("h", n, False), ("resid", n, False), ("mlp", n, True), ("ov", n, True))
  tokens = _batch(cfg, mesh, extra=0)
  return ((lambda: forward.make_group_forward(Model(cfg.model), take, n)),
          (_stacked_params(cfg, mesh), tokens, tokens))


def weight_metrics(cfg: Config, mesh):
  settings = Settings(groups=("spectrum", "per", "collapse"))
  return ((lambda: forward.make_weight_metrics(cfg.model, forward.weight_settings(settings))[0]),
          (_stacked_params(cfg, mesh),))


def collapse(cfg: Config, mesh, n_tokens: int = 4096, k_pad: int = 512):
  """The collapse passes over one batch of h (N×D) and the pairwise core on K padded classes."""
  v, d = cfg.model.vocab_size, cfg.model.d_model
  f32 = jnp.float32
  h, y = jax.ShapeDtypeStruct((n_tokens, d), f32), jax.ShapeDtypeStruct((n_tokens,), jnp.int32)
  m = jax.ShapeDtypeStruct((n_tokens,), jnp.bool_)
  mean_st = jax.eval_shape(lambda: M.mean_init(v, d))
  var_st = jax.eval_shape(lambda: M.var_init(v))
  nc4_st = jax.eval_shape(lambda: M.nc4_init(v))
  w_vd = jax.ShapeDtypeStruct((v, d), f32)
  kd, k1 = jax.ShapeDtypeStruct((k_pad, d), f32), jax.ShapeDtypeStruct((k_pad,), f32)
  kb = jax.ShapeDtypeStruct((k_pad,), jnp.bool_)
  static = dict(weighted_mean=False, norm_variant="norm", ddof=0, block=128, cdnv_exponent=2.0,
                angle_variant="cos", gnc2_centered=True, coincide_rtol=1e-6)

  def passes(mst, vst, nst, h, y, m, w, mu_vd, kmu, kvar, kw, kcnt, kvalid):
    mst = M.mean_update(mst, h, y, m)
    vst = M.var_update(vst, h, y, mu_vd, m)
    nst = M.nc4_update(nst, h, y, w, mu_vd, valid=m, chunk_size=4096)
    core = _collapse_core.core(kmu, kvar, kw, kcnt, kvalid, jnp.asarray(k_pad - 1), **static)
    return mst, vst, nst, core

  args = (mean_st, var_st, nc4_st, h, y, m, w_vd, w_vd, kd, k1, kd, k1, kb)
  return (lambda: jax.jit(passes)), tuple(_repl(mesh, a) for a in args)


def cka_by_layer(cfg: Config, mesh, n: int = 128):
  mc = cfg.model
  acts = jax.ShapeDtypeStruct((N_CKPT, mc.n_layers, n, mc.d_model), jnp.float32)
  ref = jax.ShapeDtypeStruct((mc.n_layers, n, mc.d_model), jnp.float32)
  return (lambda: jax.jit(M.cka_to_reference_by_layer)), (_repl(mesh, acts), _repl(mesh, ref))


ENTRIES = {"train_step": train_step, "population_step": population_step, "eval_step": eval_step,
           "analysis_forward": analysis_forward, "weight_metrics": weight_metrics,
           "collapse": collapse, "cka": cka_by_layer}


def lower_entry(entry: str, cfg: Config, mesh_shape, platforms=low.PLATFORMS) -> dict:
  """One export of one entry point of ``cfg`` for ``platforms`` on an abstract mesh of
  ``mesh_shape``; a result row. Raises ``sbjax.lowering.LoweringError``."""
  mesh = low.abstract_mesh(mesh_shape)
  shd.check_divisible(cfg.model, mesh, cfg.train.batch_size, cfg.train.grad_accum, 1)
  t0 = time.perf_counter()
  with jax.sharding.use_abstract_mesh(mesh), attention.assume_cudnn(False):
    make, args = ENTRIES[entry](cfg, mesh)
    exp = low.export_checked(make, args, platforms, entry)
  return {"entry": entry, "config": cfg.name, "mesh": "x".join(map(str, mesh_shape)),
          "platforms": list(exp.platforms), "devices": exp.nr_devices,
          "seconds": round(time.perf_counter() - t0, 2), "custom_calls": low.custom_calls(exp)}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m sbjax.lowering_suite", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--configs", default="pythia-160m,pythia-410m")
  ap.add_argument("--meshes", default="8x1x1,2x2x2,1x4x2,4x4x2")
  ap.add_argument("--platforms", default=",".join(low.PLATFORMS))
  ap.add_argument("--entries", default=",".join(ENTRIES))
  ap.add_argument("--dtype", default="bfloat16")
  a = ap.parse_args(argv)
  failed = 0
  for name in a.configs.split(","):
    for mesh in a.meshes.split(","):
      shape = tuple(int(x) for x in mesh.split("x"))
      cfg = suite_config(name, dtype=a.dtype, batch_size=shape[0] * shape[1] * 4)
      for entry in a.entries.split(","):
        try:
          row = lower_entry(entry, cfg, shape, a.platforms.split(","))
        except low.LoweringError as e:
          failed += 1
          row = {"entry": entry, "config": name, "mesh": mesh, "error": str(e)}
        print(json.dumps(row), flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
