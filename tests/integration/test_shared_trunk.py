"""A frozen trunk shared by a population runs once per step and equals the per-member step."""

import dataclasses

import jax
import numpy as np

from sbjax import heads
from sbjax import sharding as shd
from sbjax.train import build as build_mod
from sbjax.train.members import check_members
from sbjax.train.population import shares_trunk
from sbjax.train.step import TrainState
from tests._tiny import tiny_run_config

N = 4


def _cfgs():
  """4 members with MoS heads (lrs 1e-3 .. 4e-3) on one frozen trunk, a chunked loss."""
  base = tiny_run_config(freeze_trunk=True, init_from="unused-by-the-programs")
  model = dataclasses.replace(base.model, d_model=64, n_heads=4, loss_chunk=16,
                              head=heads.head_config("mos", n_mix=2))
  return [base.replace(model=model, train=dataclasses.replace(base.train, lr=lr, seed=i))
          for i, lr in enumerate((1e-3, 2e-3, 3e-3, 4e-3))]


def _programs(cfgs, shared: bool):
  mesh = shd.make_mesh(cfgs[0].mesh)
  with jax.set_mesh(mesh):
    return build_mod.build.uncached(cfgs[0], mesh, -1, N, check_members(cfgs), shared), mesh


def _state(fns, cfgs):
  params = fns.init(fns.keys([c.train.seed for c in cfgs]))
  # every member holds member 0's trunk, as ``init_trunk_from`` loads one trunk for all
  params = {k: v if k == heads.HEAD_KEY else jax.tree.map(
      lambda x: np.broadcast_to(np.asarray(x)[:1], x.shape), v) for k, v in params.items()}
  params = jax.device_put(params, fns.p_sh)
  return TrainState(jax.device_put(np.int32(0), fns.repl), params, fns.opt_init(params))


def _run(fns, mesh, cfgs, batch):
  """Two steps, then the evaluation: (metrics per step, params, eval) as numpy."""
  scales = np.asarray([c.train.lr / cfgs[0].train.lr for c in cfgs], np.float32)
  wds = np.asarray([c.train.weight_decay for c in cfgs], np.float32)
  with jax.set_mesh(mesh):
    state, out = _state(fns, cfgs), []
    for _ in range(2):
      state, m = fns.step(state, batch, scales, wds)
      out.append(jax.tree.map(np.asarray, m))
    ev = jax.tree.map(np.asarray, fns.eval(state.params, batch))
    flops = fns.step.lower(state, batch, scales, wds).compile().cost_analysis()["flops"]
  return out, jax.tree.map(np.asarray, state.params), ev, flops


def test_shared_trunk_equals_the_vmapped_step_at_a_fraction_of_its_flops():
  cfgs = _cfgs()
  assert shares_trunk(cfgs[0], own_batches=False)
  batch = np.random.default_rng(0).integers(0, 64, (8, 33)).astype(np.int32)
  got = _run(*_programs(cfgs, True), cfgs, batch)
  ref = _run(*_programs(cfgs, False), cfgs, batch)
  for a, b in zip(got[0], ref[0]):  # each step's loss, accuracy, grad norm, ok per member
    for k in ("loss", "acc", "grad_norm"):
      np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6, err_msg=k)
    assert a["ok"].all() and b["ok"].all()
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-6), got[1], ref[1])
  for k in ("loss", "acc"):
    np.testing.assert_allclose(got[2][k], ref[2][k], rtol=1e-6, atol=1e-6, err_msg=k)
  assert len(set(np.round(got[0][1]["loss"], 6))) == N  # the members differ
  # the trunk (2 layers, d 64) dominates these heads (V 64): one forward of it for the 4
  # members is well under half of four (measured: 0.25-0.30 of the unshared count)
  assert got[3] < 0.5 * ref[3], (got[3], ref[3])


def test_what_shares_a_trunk():
  cfg = _cfgs()[0]
  assert shares_trunk(cfg, own_batches=False)
  assert not shares_trunk(cfg, own_batches=True)  # each member its own batch
  tc = cfg.train
  assert not shares_trunk(cfg.replace(train=dataclasses.replace(tc, freeze_trunk=False)), False)
  assert not shares_trunk(cfg.replace(train=dataclasses.replace(tc, grad_accum=2)), False)
  tied = cfg.replace(model=dataclasses.replace(cfg.model, head=heads.head_config("tied")))
  assert not shares_trunk(tied, False)  # the tied head's parameters are the trunk's input
