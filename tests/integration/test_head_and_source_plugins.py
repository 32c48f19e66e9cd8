"""A new head kind and a new data source in one place: the toy kind (with its own
hyper-parameter) and the toy source (with its own fields) below are written into one
temporary module and registered there (no edit anywhere in sbjax), validated, trained one
step through the normal ``sbjax.train.train`` path, saved and reloaded; the head is counted
and sharded by its own rules."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import numpy as np
import pytest
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from sbjax import checkpoint as ckpt
from sbjax import heads, configs
from sbjax import sharding as shd
from sbjax import train as train_lib
from sbjax.config import Config
from sbjax.data import make_dataset, sources
from sbjax.model import Model


# A new head kind with a hyper-parameter (s_init) and a new data source with its own fields
# (period, vocab), each declared in this one file and nowhere else; the test writes it into a
# temporary module, imports it (which registers both) and trains on it.
PLUGIN = '''
import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from sbjax import heads
from sbjax.data import Dataset, sources
from sbjax.errors import bounded, config_error


@dataclasses.dataclass(frozen=True)
class ScaledConfig(heads.HeadConfig):
  kind: ClassVar[str] = "toy_scaled"
  s_init: float = bounded(1.0, gt=0)  # the initial per-feature scale


class ScaledModule(nn.Module):
  """scores = (h * s) W^T: a dense head with a learned per-feature scale s (d)."""

  cfg: object

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    w = self.param("w", nn.initializers.normal(c.init_std), (c.vocab_size, c.d_model))
    s = self.param("s", nn.initializers.constant(c.head.s_init), (c.d_model,))
    return jnp.einsum("...d,vd->...v", h * s.astype(h.dtype), w.astype(h.dtype))


class Scaled(heads.HeadKind):
  name = "toy_scaled"
  config = ScaledConfig
  leaf_specs = {"w": ("tensor", "fsdp"), "s": ()}

  def module(self, cfg):
    return ScaledModule(cfg, name=heads.HEAD_KEY)

  def factors(self, params, h, cfg):
    return h * params["head"]["s"].astype(h.dtype), params["head"]["w"]

  def matrix(self, params, cfg):
    return params["head"]["w"] * params["head"]["s"][None, :]

  def param_count(self, cfg) -> int:
    return cfg.vocab_size * cfg.d_model + cfg.d_model


@dataclasses.dataclass(frozen=True)
class CycleOptions(sources.SourceOptions):
  source: ClassVar[str] = "toy_cycle"
  period: int = 7  # token t is t mod period
  vocab: int = 16

  def check(self):
    if not 1 <= self.period <= self.vocab:
      raise config_error("data.options.period", self.period, f"1 .. vocab={self.vocab}")


class Cycle(sources.DataSource):
  name = "toy_cycle"
  options = CycleOptions

  def build(self, cfg, *, workdir=None, **batching):
    o = cfg.options
    toks = (np.arange(4096) % o.period).astype(np.int32)
    return Dataset(toks, toks[:2048], vocab_size=o.vocab, name=f"cycle({o.period})",
                   source=self.name, **batching)


heads.register(Scaled())
sources.register(Cycle())
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
  path = tmp_path_factory.mktemp("plugin") / "toy_plugin.py"
  path.write_text(PLUGIN)
  spec = importlib.util.spec_from_file_location("toy_plugin", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)  # registers the head kind and the data source
  yield module
  heads.unregister("toy_scaled")
  sources.unregister("toy_cycle")


def test_new_head_and_data_source_from_one_file_train(plugin, tmp_path):
  d = configs.get("tiny").to_dict()
  d["model"]["head"] = {"kind": "toy_scaled", "s_init": 0.5}
  d["data"].update(source="toy_cycle", options={"period": 5})
  d["train"].update(steps=1, eval_every=1, log_every=1, ckpt_every=1)
  cfg = Config.from_dict(d)
  assert cfg.model.head == plugin.ScaledConfig(s_init=0.5)
  assert cfg.data.options == plugin.CycleOptions(period=5, vocab=16)
  assert "toy_scaled" in heads.names() and cfg.model.rank == cfg.model.d_model
  with pytest.raises(ValueError, match=r"model\.head\.s_init=0; allowed: a finite number > 0"):
    Config.from_dict({**d, "model": {**d["model"], "head": {"kind": "toy_scaled", "s_init": 0}}})
  with pytest.raises(ValueError, match=r"data\.options\.period=20; allowed: 1 \.\. vocab=16"):
    Config.from_dict({**d, "data": {**d["data"], "options": {"period": 20}}})
  with pytest.raises(ValueError, match=r"data\.options=CycleOptions\(period=5, vocab=16\); "
                                       r"allowed: the options of data\.source=planted"):
    dataclasses.replace(cfg.data, source="planted")
  ds = make_dataset(cfg.data, seq_len=8, global_batch_size=2)
  assert ds.source == "toy_cycle" and int(ds.train_batch(0).max()) == 4  # t mod 5
  assert math.isfinite(train_lib.train(cfg, tmp_path / "run", quiet=True)["eval_loss"])
  saved_cfg, params, step = ckpt.load_params(tmp_path / "run")
  assert step == 1 and saved_cfg.model.head == cfg.model.head and saved_cfg.data == cfg.data
  assert params["head"]["s"].shape == (cfg.model.d_model,) and params["embed"].shape[0] == 16
  # s started at s_init and the step moved it
  assert np.abs(np.asarray(params["head"]["s"]) - 0.5).max() < 0.1
  assert not np.allclose(np.asarray(params["head"]["s"]), 0.5)
  # the kind's own counts and sharding rule reach the model and the mesh
  model, mc = Model(saved_cfg.model), saved_cfg.model
  assert model.param_count(params) - model.param_count(
      {k: v for k, v in params.items() if k != "head"}) == heads.get(mc.head).param_count(mc)
  specs = shd.tree_specs(params, AbstractMesh((2, 2, 2), shd.AXES))
  assert specs["head"]["w"] == P("tensor", "fsdp") and specs["head"]["s"] == P(None)
