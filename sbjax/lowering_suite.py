"""The lowering suite: every jitted entry point of sbjax exported once for CPU, CUDA and TPU
(one ``jax.export`` with ``platforms=("cpu", "cuda", "tpu")``) on an abstract (data, fsdp,
tensor) mesh, with the shardings the runs use (``sbjax.lowering``).

Entry points (``ENTRIES``; each builds fresh jits from the project's own constructors):

- ``train_step``: ``sbjax.train.single``'s jitted state step (with ``train.grad_accum``
  micro-batches), state and batch sharded as in a run;
- ``population_step``: ``make_population_step`` over 2 members with per-member learning-rate
  scales, the member axis leading and unsharded (as ``sbjax.train.population``);
- ``eval_step``: the run's jitted eval step;
- ``analysis_forward``: the analysis's grouped forward over K=2 stacked checkpoints
  (``sbjax.analysis.forward.make_group_forward``: loss sums, h, resid, MLP/OV outputs);
- ``weight_metrics``: head spectra (singular values, KL, erank, W-error), per-layer PER and
  the head matrix over stacked checkpoints (``make_weight_metrics``);
- ``collapse``: the neural-collapse kernels (class-mean, variance and NC4 accumulators, the
  pairwise core) and ``cka``: CKA-to-reference by layer (``sbjax.metrics``);
- ``attention``: the attention core alone, forward and backward, on one device.

Attention kernels (``sbjax.attention``): ``attn_impl=auto`` is staged per platform, so the
entries export for all three platforms at once; traced here (no GPU) its cuda branch is
XLA's kernel. Two kernels lower on one platform only, and an entry that contains them is
exported for that platform alone (``export_platforms``): ``attn_impl=cudnn`` for cuda (the
kernel ``auto`` picks on a GPU; traced under ``sbjax.lowering.assume_cudnn_version``) and
``attn_impl=splash`` for tpu. Sharded cuDNN attention cannot be exported at all (a
``custom_partitioning`` op whose partitioner is a host callback, which ``jax.export`` cannot
serialise nor lower on an ``AbstractMesh``), so the sharded entries of a cudnn config carry
``auto`` with cuDNN counted unavailable (XLA's kernel on cuda), as ``auto`` falls back on a
GPU; the unsharded ``attention`` entry carries cuDNN itself.

Command line (the whole matrix; the tests run a representative part of it)::

    python -m sbjax.lowering_suite --configs=pythia-160m,pythia-410m \
        --meshes=8x1x1,2x2x2,1x4x2,4x4x2 [--platforms=cpu,cuda,tpu] [--attn_impl=splash|cudnn]

Precision: ``--dtype=bfloat16`` compute with float32 parameters (the default).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import attention, configs
from sbjax import lowering as low
from sbjax import sharding as shd
from sbjax.analysis import forward
from sbjax.analysis.settings import Settings
from sbjax.config import Config
from sbjax import metrics as M
from sbjax.metrics import _collapse_core
from sbjax.model import Model
from sbjax.optim import make_optimizer
from sbjax.train import build as train_build
from sbjax.train.population import make_population_step
from sbjax.train.step import TrainState, state_step

MESHES_8 = ((8, 1, 1), (2, 2, 2), (1, 4, 2))
MESHES_32 = ((4, 4, 2),)  # the scale presets
N_MEMBERS, N_CKPT = 2, 2


def suite_config(name: str, *, dtype: str = "bfloat16", attn_impl: str = "auto",
                 grad_accum: int = 4, batch_size: int = 0, seq_len: int = 0,
                 **model) -> Config:
  """The named config ``name`` for lowering: ``dtype`` compute, float32 params, an
  accumulating step; batch/seq default to the config's own; ``model`` overrides fields."""
  cfg = configs.get(name)
  tc = cfg.train
  return cfg.replace(
      model=dataclasses.replace(cfg.model, dtype=dtype, param_dtype="float32",
                                attn_impl=attn_impl, **model),
      train=dataclasses.replace(tc, grad_accum=grad_accum, batch_size=batch_size or tc.batch_size,
                                seq_len=seq_len or tc.seq_len))


def _repl(mesh, tree):
  return low.sds(tree, jax.tree.map(lambda _: shd.replicated(mesh), tree))


def _batch(cfg: Config, mesh, extra: int = 1):
  return jax.ShapeDtypeStruct((cfg.train.batch_size, cfg.train.seq_len + extra), jnp.int32,
                              sharding=shd.batch_sharding(mesh))


def _run_fns(cfg: Config, mesh):
  return train_build.build(cfg, mesh, -1)


def train_step(cfg: Config, mesh):
  def make():
    return _run_fns(cfg, mesh).step
  fns = _run_fns(cfg, mesh)
  state = TrainState(jax.ShapeDtypeStruct((), jnp.int32, sharding=fns.repl),
                     low.sds(fns.abstract, fns.p_sh), low.sds(fns.abstract_opt, fns.o_sh))
  return make, (state, _batch(cfg, mesh))


def eval_step(cfg: Config, mesh):
  fns = _run_fns(cfg, mesh)
  return (lambda: _run_fns(cfg, mesh).eval), (low.sds(fns.abstract, fns.p_sh), _batch(cfg, mesh))


def _stacked(tree, n: int):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct((n,) + x.shape, x.dtype), tree)


def population_step(cfg: Config, mesh):
  tc, model = cfg.train, Model(cfg.model)
  abstract = model.abstract_params(tc.seq_len)
  tx = make_optimizer(tc, cfg.model, abstract)
  p = _stacked(abstract, N_MEMBERS)
  o = _stacked(jax.eval_shape(tx.init, abstract), N_MEMBERS)
  repl = shd.replicated(mesh)
  state_sh = TrainState(repl, shd.tree_shardings(p, mesh, 1), shd.tree_shardings(o, mesh, 1))

  def make():
    step = state_step(make_population_step(Model(cfg.model), tx, tc, True))
    return jax.jit(step, in_shardings=(state_sh, shd.batch_sharding(mesh), repl),
                   out_shardings=(state_sh, repl))

  state = TrainState(jax.ShapeDtypeStruct((), jnp.int32, sharding=repl),
                     low.sds(p, state_sh.params), low.sds(o, state_sh.opt_state))
  scales = jax.ShapeDtypeStruct((N_MEMBERS,), jnp.float32, sharding=repl)
  return make, (state, _batch(cfg, mesh), scales)


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


def attention_kernel(cfg: Config, mesh):
  """Forward and backward of one layer's attention core (``sbjax.attention.attend``, local
  layers too) on one device at the per-device batch (the only entry that can carry the
  cuDNN kernel: it cannot be exported sharded, see the module doc)."""
  mc = cfg.model
  b = max(1, cfg.train.batch_size // (cfg.train.grad_accum * shd.data_parallel_size(mesh)))
  x = jax.ShapeDtypeStruct((b, cfg.train.seq_len, mc.n_heads, mc.head_dim), jnp.dtype(mc.dtype))
  kinds = sorted(set(mc.layer_kinds()))

  def loss(q, k, v):
    return sum(attention.attend(mc, q, k, v, scale=1.0 / mc.head_dim ** 0.5, local=kind == "local")
               .astype(jnp.float32).sum() for kind in kinds)

  return (lambda: jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))), (x, x, x)


ENTRIES = {"train_step": train_step, "population_step": population_step, "eval_step": eval_step,
           "analysis_forward": analysis_forward, "weight_metrics": weight_metrics,
           "collapse": collapse, "cka": cka_by_layer, "attention": attention_kernel}
UNSHARDED = ("attention",)  # exported on one device
WITH_ATTENTION = ("train_step", "population_step", "eval_step", "analysis_forward", "attention")
ONLY_ON = {"cudnn": "cuda", "splash": "tpu"}  # kernels that lower on one platform only


def export_platforms(entry: str, cfg: Config, platforms=low.PLATFORMS) -> tuple[str, ...]:
  """The platforms one export of ``entry`` can serve: all of ``platforms``, or the one that
  a single-platform attention kernel of ``cfg`` needs (``ONLY_ON``)."""
  platforms = low.check_platforms(platforms)
  if entry not in WITH_ATTENTION:
    return platforms
  only = {ONLY_ON[k] for k in attention.platform_kernels(cfg.model).values() if k in ONLY_ON}
  kept = tuple(p for p in platforms if not only or p in only)
  if not kept or len(only) > 1:
    raise ValueError(f"{entry} with model.attn_impl={cfg.model.attn_impl} exports only for "
                     f"{sorted(only)}, not for {list(platforms)}; pass --platforms="
                     f"{','.join(sorted(only))} or --attn_impl=auto")
  return kept


def _sharded_config(cfg: Config) -> Config:
  """A cudnn config's sharded form: ``auto`` (see the module doc)."""
  if cfg.model.attn_impl != "cudnn":
    return cfg
  return cfg.replace(model=dataclasses.replace(cfg.model, attn_impl="auto"))


def lower_entry(entry: str, cfg: Config, mesh_shape, platforms=low.PLATFORMS) -> dict:
  """One export of one entry point of ``cfg`` for ``platforms`` (narrowed by
  ``export_platforms``) on an abstract mesh; a result row. Raises
  ``sbjax.lowering.LoweringError`` naming what does not lower."""
  mesh = low.abstract_mesh(mesh_shape)
  n_dev = int(np.prod(mesh_shape))
  shd.check_divisible(cfg.model, mesh, cfg.train.batch_size, cfg.train.grad_accum, 1)
  t0 = time.perf_counter()
  if entry in UNSHARDED:
    plats = export_platforms(entry, cfg, platforms)
    make, args = ENTRIES[entry](cfg, mesh)
    row = low.timed_export(make, args, plats, entry, cfg.model.attn_impl == "cudnn")
  else:
    cfg = _sharded_config(cfg)
    with jax.sharding.use_abstract_mesh(mesh), attention.assume_cudnn(False):
      plats = export_platforms(entry, cfg, platforms)
      make, args = ENTRIES[entry](cfg, mesh)
      row = low.timed_export(make, args, plats, entry)
  row.update(config=cfg.name, mesh="x".join(map(str, mesh_shape)), seconds=round(
      time.perf_counter() - t0, 2))
  assert row["devices"] == (1 if entry in UNSHARDED else n_dev), row
  return row


def _parse(argv):
  ap = argparse.ArgumentParser(prog="python -m sbjax.lowering_suite", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--configs", default="pythia-160m,pythia-410m")
  ap.add_argument("--meshes", default=",".join("x".join(map(str, m))
                                               for m in MESHES_8 + MESHES_32))
  ap.add_argument("--platforms", default=",".join(low.PLATFORMS))
  ap.add_argument("--entries", default=",".join(ENTRIES))
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--attn_impl", default="auto",
                  help="auto: one export for every platform; splash: tpu only; cudnn: cuda only")
  ap.add_argument("--json", default="", help="also write the rows to this JSON file")
  return ap.parse_args(argv)


def main(argv=None) -> int:
  a = _parse(argv)
  rows, failed = [], 0
  for name in a.configs.split(","):
    for mesh in a.meshes.split(","):
      shape = tuple(int(x) for x in mesh.split("x"))
      dp = shape[0] * shape[1]
      for entry in a.entries.split(","):
        cfg = suite_config(name, dtype=a.dtype, attn_impl=a.attn_impl, grad_accum=4,
                           batch_size=dp * 4)
        try:
          row = lower_entry(entry, cfg, shape, a.platforms.split(","))
        except low.LoweringError as e:
          failed += 1
          row = {"entry": entry, "platforms": a.platforms, "config": name, "mesh": mesh,
                 "error": str(e)}
        rows.append(row)
        print(json.dumps(row), flush=True)
  if a.json:
    with open(a.json, "w") as f:
      json.dump(rows, f, indent=1)
  print(f"{len(rows) - failed}/{len(rows)} lowered", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
