"""Scale-out: meshes, PartitionSpecs, equality across meshes, topology-independent checkpoints.

The 8-device checks run in a subprocess (tests/_multidevice.py) because this pytest
process already started JAX with one CPU device.
"""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from sbjax import checkpoint as ckpt
from sbjax import sharding as shd
from sbjax.config import MeshConfig, ModelConfig
from sbjax.model import Model
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from tests import _multidevice as md

TOL = 1e-5


def amesh(d, f, t):
  return AbstractMesh((d, f, t), shd.AXES)


# ----------------------------------------------------------------------------- in-process


def test_mesh_shape_fills_and_refuses():
  assert shd.mesh_shape(MeshConfig(-1, 1, 1), 8) == (8, 1, 1)
  assert shd.mesh_shape(MeshConfig(2, -1, 2), 8) == (2, 2, 2)
  assert shd.mesh_shape(MeshConfig(1, 4, -1), 8) == (1, 4, 2)
  with pytest.raises(ValueError, match=r"mesh \(data, fsdp, tensor\)=\(3, -1, 1\) does not divide "
                                       r"the 8 devices"):
    shd.mesh_shape(MeshConfig(3, -1, 1), 8)
  with pytest.raises(ValueError, match=r"needs 12 devices but 8 are available"):
    shd.mesh_shape(MeshConfig(3, 2, 2), 8)
  with pytest.raises(ValueError, match="at most one -1"):
    shd.mesh_shape(MeshConfig(-1, -1, 1), 8)
  with pytest.raises(ValueError, match="sizes are >= 1 or -1"):
    shd.mesh_shape(MeshConfig(0, 1, 1), 8)


def test_make_mesh_on_one_device_refuses_two():
  mesh = shd.make_mesh(MeshConfig(-1, 1, 1))
  assert mesh.axis_names == shd.AXES and mesh.devices.size == jax.device_count()
  with pytest.raises(ValueError, match=f"needs 2 devices but {jax.device_count()} are available"):
    shd.make_mesh(MeshConfig(2, jax.device_count(), 1))


def test_check_divisible_messages():
  mc = ModelConfig(vocab_size=64, d_model=32, n_heads=4)
  shd.check_divisible(mc, amesh(2, 2, 2), 8)
  with pytest.raises(ValueError, match=r"global batch 6 is not divisible by the data-parallel "
                                       r"size data\*fsdp=4"):
    shd.check_divisible(mc, amesh(2, 2, 2), 6)
  with pytest.raises(ValueError, match=r"times grad_accum=2\); use a batch that is a multiple of 8"):
    shd.check_divisible(mc, amesh(2, 2, 2), 4, grad_accum=2)
  with pytest.raises(ValueError, match=r"model.vocab_size=50 is not divisible by the tensor axis "
                                       r"size 8; pad the vocabulary to 56"):
    shd.check_divisible(dataclasses.replace(mc, vocab_size=50), amesh(1, 1, 8), 8)
  with pytest.raises(ValueError, match=r"data\*fsdp=1 is not a multiple of the 2 processes"):
    shd.check_divisible(mc, amesh(1, 1, 8), 8, process_count=2)


def _specs(mc, mesh, scan=False):
  mc = dataclasses.replace(mc, scan_layers=scan)
  return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(
      shd.tree_specs(Model(mc).abstract_params(), mesh), is_leaf=lambda x: isinstance(x, P))}


def test_param_specs_rules_all_heads():
  base = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=8, rotary_pct=0.5,
                     max_len=16)
  m = amesh(2, 2, 2)
  s = _specs(base, m)
  assert s["['embed']"] == P("tensor", "fsdp")
  assert s["['head']['w']"] == P("tensor", "fsdp")
  assert s["['block_0']['attn']['q_kernel']"] == P("fsdp", "tensor", None)
  assert s["['block_1']['attn']['o_kernel']"] == P("tensor", None, "fsdp")
  assert s["['block_0']['mlp']['fc_in_kernel']"] == P("fsdp", "tensor")
  assert s["['block_0']['mlp']['fc_out_kernel']"] == P("tensor", "fsdp")
  assert s["['block_0']['attn']['q_bias']"] == P(None, None)
  assert s["['ln_f']['scale']"] == P(None)
  # scanned layers: a leading unsharded layer axis
  s = _specs(base, m, scan=True)
  assert s["['blocks']['attn']['q_kernel']"] == P(None, "fsdp", "tensor", None)
  assert s["['blocks']['mlp']['fc_in_kernel']"] == P(None, "fsdp", "tensor")
  # low-rank head: A (V×r) vocab on tensor, r on fsdp; B (r×D) D on fsdp
  s = _specs(dataclasses.replace(base, head=LowRankHead(rank=4)), m)
  assert s["['head']['a']"] == P("tensor", "fsdp")
  assert s["['head']['b']"] == P(None, "fsdp")
  s = _specs(dataclasses.replace(base, head=LowRankHead(rank=3)), m)  # 3 % 2: r unsharded
  assert s["['head']['a']"] == P("tensor", None)
  # mixture of softmaxes: shared W as the dense head, projections D on fsdp
  s = _specs(dataclasses.replace(base, head=MoSHead(n_mix=3)), m)
  assert s["['head']['w']"] == P("tensor", "fsdp")
  assert s["['head']['proj_w']"] == P("fsdp", None, None)
  assert s["['head']['prior_w']"] == P("fsdp", None)
  # tied head + learned positions
  s = _specs(dataclasses.replace(base, head="tied", pos="learned"), m)
  assert "['head']['w']" not in s and s["['pos_embed']"] == P(None, "fsdp")
  # the tiny preset's 2 heads do not divide tensor=8: left unsharded on that axis
  s = _specs(dataclasses.replace(base, n_heads=2, rotary_pct=0.25), amesh(1, 1, 8))
  assert s["['block_0']['attn']['q_kernel']"] == P("fsdp", None, None)  # fsdp=1: a no-op
  assert s["['block_0']['mlp']['fc_in_kernel']"] == P("fsdp", "tensor")  # F=128 divides


def test_optimizer_state_and_population_specs_follow_params():
  from sbjax.config import TrainConfig
  from sbjax.optim import make_optimizer

  mc = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_len=16)
  abstract = Model(mc).abstract_params()
  opt = jax.eval_shape(make_optimizer(TrainConfig(), mc, abstract).init, abstract)
  specs = shd.tree_specs(opt, amesh(2, 2, 2))
  adam = specs[1][0]
  assert adam.mu["embed"] == P("tensor", "fsdp") and adam.nu["head"]["w"] == P("tensor", "fsdp")
  assert adam.count == P()
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((3,) + x.shape, x.dtype), abstract)
  ps = shd.tree_specs(stacked, amesh(2, 2, 2), leading=1)
  assert ps["embed"] == P(None, "tensor", "fsdp")
  assert ps["block_0"]["attn"]["q_kernel"] == P(None, "fsdp", "tensor", None)


# ----------------------------------------------------------------------------- 8 devices


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
  out = tmp_path_factory.mktemp("meshes")
  return out, md.run_task("meshes", out, cache_dir=md.cache_dir(tmp_path_factory), timeout=300)


def test_same_losses_and_params_on_every_mesh(meshes):
  _, res = meshes
  assert set(res["meshes"]) == {str(m) for m in md.MESHES}
  for name, r in res["meshes"].items():
    assert r["max_loss_diff"] < TOL, (name, r["losses"], res["ref_losses"])
    assert r["max_param_diff"] < TOL, name
  # the full training loop on (2,2,2) logs the same losses
  np.testing.assert_allclose(res["train_losses_222"], res["ref_losses"], atol=TOL, rtol=0)


def test_parameters_really_are_sharded(meshes):
  _, res = meshes
  r = res["meshes"]["(2, 2, 2)"]["specs"]
  assert r["embed"] == ["tensor", "fsdp"] and r["head"] == ["tensor", "fsdp"]
  assert r["q_kernel"] == ["fsdp", "tensor", None]
  assert r["fc_in"] == ["fsdp", "tensor"] and r["fc_out"] == ["tensor", "fsdp"]
  assert r["ln_scale"] == [None]
  # per-device shard shapes: V=64, D=32, H=8, Dh=4, F=128
  sh = res["meshes"]
  assert sh["(2, 2, 2)"]["shard_shapes"]["embed"] == [32, 16]
  assert sh["(1, 4, 2)"]["shard_shapes"]["fc_in"] == [8, 64]
  assert sh["(1, 1, 8)"]["shard_shapes"]["q_kernel"] == [32, 1, 4]  # 8 heads over tensor=8
  assert sh["(1, 1, 8)"]["shard_shapes"]["head"] == [8, 32]
  assert sh["(8, 1, 1)"]["shard_shapes"]["embed"] == [64, 32]  # pure data parallel: replicated


def test_checkpoint_saved_on_222_restores_elsewhere(meshes):
  out, res = meshes
  assert res["meta_step"] == 3
  assert res["restored_811_ndev"] == 8 and res["restored_811_spec_embed"] == ["tensor", "fsdp"]
  assert res["restored_1_ndev"] == 1
  assert res["restore_811_vs_1"] == 0.0 and res["restore_142_vs_1"] == 0.0
  assert res["restore_vs_steps_222"] < TOL
  assert res["restore_142_opt_spec_q"] == ["fsdp", "tensor", None]
  # and in this process, on its single CPU device
  cfg, params, step = ckpt.load_params(out / "run_222", 3)
  assert step == 3 and cfg.mesh == MeshConfig(2, 2, 2)
  saved = np.load(out / "params_step3.npz")
  mine = md.tree_to_np(params)
  assert set(mine) == set(saved.files)
  for k in mine:
    np.testing.assert_array_equal(mine[k], saved[k])
