"""The tied head: scores = h·Eᵀ with the input embedding E (V×d); no parameters of its own."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from sbjax.heads.base import HeadConfig, HeadKind, register
from sbjax.precision import matmul_precision


@dataclasses.dataclass(frozen=True)
class TiedHead(HeadConfig):
  """A tied head has no fields of its own."""

  kind: ClassVar[str] = "tied"


class Tied(HeadKind):
  name = "tied"
  order = 1
  param_keys = ("embed",)  # frozen-trunk mode trains the embedding (it is the head)
  hf_tied = True
  hf_imports = True
  config = TiedHead

  def module(self, cfg):
    return None

  def scores(self, params, h, cfg):
    return jnp.einsum("...d,vd->...v", h, params["embed"].astype(h.dtype),
                      precision=matmul_precision(cfg))

  def factors(self, params, h, cfg):
    return h, params["embed"]

  def matrix(self, params, cfg):
    return params["embed"]

  def param_count(self, cfg) -> int:
    return 0

  def flop_params(self, cfg) -> int:
    return cfg.vocab_size * cfg.d_model  # the embedding's V×d product is still computed


register(Tied())
