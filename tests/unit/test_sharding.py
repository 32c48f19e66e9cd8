"""sbjax.sharding's rules on abstract meshes: the mesh shape, the divisibility checks, the
PartitionSpec of each parameter (every head kind, the scan layout, optimizer states,
populations), a rule for every leaf of every preset model. (Equal numbers on 8 devices and
across processes: tests/e2e/test_mesh_equality.py.)"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from sbjax import configs, heads
from sbjax import sharding as shd
from sbjax.config import MeshConfig, ModelConfig, TrainConfig
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from sbjax.model import Model
from sbjax.optim import make_optimizer

MESH = AbstractMesh((2, 2, 2), shd.AXES)
BASE = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=8, rotary_pct=0.5, max_len=16)


def test_mesh_shape_and_the_checks_that_name_the_fix():
  """(A mesh that does not divide the devices, a batch the data axes do not divide: the
  bad-input table.)"""
  assert shd.mesh_shape(MeshConfig(2, -1, 2), 8) == (2, 2, 2)
  assert shd.mesh_shape(MeshConfig(1, 4, -1), 8) == (1, 4, 2)
  with pytest.raises(ValueError, match="model.vocab_size=50 is not divisible by the tensor axis "
                     "size 8; pad the vocabulary to 56"):
    shd.check_divisible(dataclasses.replace(BASE, vocab_size=50), AbstractMesh((1, 1, 8),
                                                                               shd.AXES), 8)
  with pytest.raises(ValueError, match=r"data\*fsdp=1 is not a multiple of the 2 processes"):
    shd.check_divisible(BASE, AbstractMesh((1, 1, 8), shd.AXES), 8, process_count=2)


def _specs(mc, mesh=MESH):
  return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(
      shd.tree_specs(Model(mc).abstract_params(), mesh), is_leaf=lambda x: isinstance(x, P))}


def test_param_specs_of_the_trunk_and_every_head():
  s = _specs(BASE)
  assert s["['embed']"] == s["['head']['w']"] == P("tensor", "fsdp")
  assert s["['block_0']['attn']['q_kernel']"] == P("fsdp", "tensor", None)
  assert s["['block_1']['attn']['o_kernel']"] == P("tensor", None, "fsdp")
  assert s["['block_0']['mlp']['fc_in_kernel']"] == P("fsdp", "tensor")
  assert s["['block_0']['mlp']['fc_out_kernel']"] == P("tensor", "fsdp")
  assert s["['block_0']['attn']['q_bias']"] == P(None, None) and s["['ln_f']['scale']"] == P(None)
  s = _specs(dataclasses.replace(BASE, scan_layers=True))  # a leading unsharded layer axis
  assert s["['blocks']['attn']['q_kernel']"] == P(None, "fsdp", "tensor", None)
  s = _specs(dataclasses.replace(BASE, head=LowRankHead(rank=4)))
  assert s["['head']['a']"] == P("tensor", "fsdp") and s["['head']['b']"] == P(None, "fsdp")
  s = _specs(dataclasses.replace(BASE, head=LowRankHead(rank=3)))  # 3 % 2: r unsharded
  assert s["['head']['a']"] == P("tensor", None)
  s = _specs(dataclasses.replace(BASE, head="tied", pos="learned"))
  assert "['head']['w']" not in s and s["['pos_embed']"] == P(None, "fsdp")
  # the tiny preset's 2 heads do not divide tensor=8: left unsharded on that axis
  s = _specs(dataclasses.replace(BASE, n_heads=2, rotary_pct=0.25),
             AbstractMesh((1, 1, 8), shd.AXES))
  assert s["['block_0']['attn']['q_kernel']"] == P("fsdp", None, None)
  mos = Model(dataclasses.replace(BASE, head=MoSHead(n_mix=3))).abstract_params()
  specs = shd.tree_specs(mos, MESH)  # a head kind's own leaves: its leaf_specs
  for leaf, spec in heads.get("mos").leaf_specs.items():
    assert tuple(specs["head"][leaf]) == (tuple(spec) or (None,) * mos["head"][leaf].ndim)


def test_optimizer_state_and_population_specs_follow_params():
  abstract = Model(BASE).abstract_params()
  adam = shd.tree_specs(jax.eval_shape(make_optimizer(TrainConfig(), BASE, abstract).init,
                                       abstract), MESH)[1][0]
  assert adam.mu["embed"] == adam.nu["head"]["w"] == P("tensor", "fsdp") and adam.count == P()
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((3,) + x.shape, x.dtype), abstract)
  ps = shd.tree_specs(stacked, MESH, leading=1)
  assert ps["embed"] == P(None, "tensor", "fsdp")
  assert ps["block_0"]["attn"]["q_kernel"] == P(None, "fsdp", "tensor", None)


def _small(mc: ModelConfig, scan: bool) -> ModelConfig:
  """The preset's structure (positions, biases, head, layer kinds) at a tiny size."""
  n = min(mc.n_layers, 2)
  kinds = mc.attention_layers[:n]
  kw = dict(vocab_size=64, d_model=32, n_heads=2, n_layers=n, max_len=16, d_ff=0,
            scan_layers=scan, rotary_pct=0.25,
            attention_layers=kinds[:1] * n if scan and len(set(kinds)) > 1 else kinds)
  if mc.head.kind == "lowrank":
    kw["head"] = LowRankHead(rank=4)
  return dataclasses.replace(mc, **kw)


@pytest.mark.parametrize("scan", [False, True])
def test_every_leaf_of_every_preset_has_a_rule(scan):
  models = [configs.get(n).model for n in [*configs.NAMED, "neo-L4-d128"]]
  models += [dataclasses.replace(BASE, head=h) for h in (LowRankHead(3), MoSHead(2), "tied")]
  for mc in models:
    mc = _small(dataclasses.replace(mc, vocab_size=mc.vocab_size or 64), scan)
    abstract = Model(mc).abstract_params()
    specs = shd.tree_specs(abstract, MESH)  # raises on an unknown leaf
    assert jax.tree.structure(specs, is_leaf=lambda x: isinstance(x, P)) == \
        jax.tree.structure(abstract)
    for tc in (TrainConfig(), TrainConfig(freeze_trunk=True, init_from="x")):
      shd.tree_specs(jax.eval_shape(make_optimizer(tc, mc, abstract).init, abstract), MESH)


def test_unknown_leaf_raises_naming_its_path():
  leaf = jax.ShapeDtypeStruct((4, 4), jnp.float32)
  with pytest.raises(ValueError, match=r"no sharding rule for the parameter leaf "
                                       r"block_0/attn/mystery_kernel \(2 dims\)"):
    shd.tree_specs({"block_0": {"attn": {"mystery_kernel": leaf}}}, MESH)
  with pytest.raises(ValueError, match=r"parameter leaf head/zz .*leaf_specs"):
    shd.tree_specs({"head": {"zz": leaf}}, MESH)
  assert shd.tree_specs({"count": jax.ShapeDtypeStruct((), jnp.int32)}, MESH)["count"] == P()
