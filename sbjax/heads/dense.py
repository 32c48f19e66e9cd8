"""The dense head: scores = h·Wᵀ with its own V×d matrix W ~ N(0, init_std²)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from sbjax.heads.base import HEAD_KEY, HeadConfig, HeadKind, register
from sbjax.precision import matmul_precision

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class DenseHead(HeadConfig):
  """A dense head has no fields of its own."""

  kind: ClassVar[str] = "dense"


class _DenseModule(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    w = self.param("w", nn.initializers.normal(c.init_std), (c.vocab_size, c.d_model),
                   jnp.dtype(c.param_dtype))
    return jnp.einsum("...d,vd->...v", h, w.astype(h.dtype), precision=matmul_precision(c))


class Dense(HeadKind):
  name = "dense"
  order = 0
  leaf_specs = {"w": ("tensor", "fsdp")}  # V×D: vocab on tensor, D on fsdp
  hf_tied = False
  hf_imports = True
  config = DenseHead

  def module(self, cfg):
    return _DenseModule(cfg, name=HEAD_KEY)

  def factors(self, params, h, cfg):
    return h, params[HEAD_KEY]["w"]

  def matrix(self, params, cfg):
    return params[HEAD_KEY]["w"]

  def param_count(self, cfg) -> int:
    return cfg.vocab_size * cfg.d_model

  def hf_params(self, w_VxD, cfg) -> dict:
    return {"w": w_VxD}


register(Dense())
