"""A new head kind in one place: the toy kind below is defined and registered only in this
file (no edit anywhere in sbjax), then trained one step through the normal
``sbjax.train.train`` path, saved and reloaded, sharded, counted and frozen-trunk labelled.
Also: the model's scores are its head kind's scores of the final features (tied)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from sbjax import checkpoint as ckpt
from sbjax import heads, configs
from sbjax import sharding as shd
from sbjax import train as train_lib
from sbjax.config import Config, ModelConfig
from sbjax.model import Model
from sbjax.optim import trainable_labels


class ScaledHead(nn.Module):
  """scores = (h ⊙ s)·Wᵀ: a dense head with a learned per-feature scale s (d)."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    w = self.param("w", nn.initializers.normal(c.init_std), (c.vocab_size, c.d_model))
    s = self.param("s", nn.initializers.ones, (c.d_model,))
    return jnp.einsum("...d,vd->...v", h * s.astype(h.dtype), w.astype(h.dtype))


@dataclasses.dataclass(frozen=True)
class ScaledConfig(heads.HeadConfig):
  kind: ClassVar[str] = "toy_scaled"


class Scaled(heads.HeadKind):
  name = "toy_scaled"
  config = ScaledConfig
  leaf_specs = {"w": ("tensor", "fsdp"), "s": ()}

  def module(self, cfg):
    return ScaledHead(cfg, name=heads.HEAD_KEY)

  def factors(self, params, h, cfg):
    return h * params["head"]["s"].astype(h.dtype), params["head"]["w"]

  def matrix(self, params, cfg):
    return params["head"]["w"] * params["head"]["s"][None, :]

  def param_count(self, cfg) -> int:
    return cfg.vocab_size * cfg.d_model + cfg.d_model


def test_tied_model_scores_are_the_head_scores_of_its_features():
  """The tied head's scores come from its kind's ``scores`` (it has no module)."""
  mc = ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, max_len=8, head="tied")
  model = Model(mc)
  params = jax.jit(model.init)(jax.random.key(1))
  tokens = jnp.arange(6, dtype=jnp.int32)[None] % mc.vocab_size
  both = jax.jit(lambda p: (model.apply(p, tokens),
                            heads.scores_fn(p, mc)(model.features(p, tokens))))
  np.testing.assert_array_equal(*both(params))


@pytest.fixture(scope="module")
def toy():
  kind = heads.register(Scaled())
  yield kind
  heads.unregister(kind.name)


def test_toy_head_trains_one_step(toy, tmp_path):
  d = configs.get("tiny")
  d["model"].update(head=toy.name)
  d["train"].update(steps=1, eval_every=1, log_every=1, ckpt_every=1)
  cfg = Config.from_dict(d)
  assert toy.name in heads.names() and cfg.model.rank == cfg.model.d_model
  summary = train_lib.train(cfg, tmp_path / "run", quiet=True)
  rows = [r for r in train_lib.read_metrics(tmp_path / "run") if "loss" in r]
  assert rows and all(math.isfinite(r["loss"]) for r in rows)
  assert math.isfinite(summary["eval_loss"])
  saved_cfg, params, step = ckpt.load_params(tmp_path / "run")
  assert step == 1 and saved_cfg.model.head == ScaledConfig()
  mc = saved_cfg.model
  assert set(params["head"]) == {"w", "s"}
  assert not np.allclose(np.asarray(params["head"]["s"]), 1.0)  # the step moved the scale
  # counts, the model's chunked loss through the factors, sharding and frozen-trunk labels
  model = Model(mc)
  assert model.param_count(params) - model.param_count(
      {k: v for k, v in params.items() if k != "head"}) == toy.param_count(mc)
  batch = jnp.arange(2 * 9, dtype=jnp.int32).reshape(2, 9) % mc.vocab_size
  full, _ = model.loss(params, batch)
  chunked, _ = Model(dataclasses.replace(mc, loss_chunk=6)).loss(params, batch)
  np.testing.assert_allclose(chunked, full, rtol=1e-5)
  np.testing.assert_allclose(model.head_matrix(params), heads.head_matrix(params, mc))
  specs = shd.tree_specs(params, AbstractMesh((2, 2, 2), shd.AXES))
  assert specs["head"]["w"] == P("tensor", "fsdp") and specs["head"]["s"] == P(None)
  labels = trainable_labels(params, mc, True)
  assert set(jax.tree.leaves(labels["head"])) == {"train"}
  assert set(jax.tree.leaves(labels["embed"])) == {"freeze"}
