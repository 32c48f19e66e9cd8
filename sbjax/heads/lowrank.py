"""The low-rank head: W = A·B with A (V×r) and B (r×d), scores = (h·Bᵀ)·Aᵀ.

Config ``LowRankHead(rank, init)``. Inits (``init``):
- ``godey``: A and B entries i.i.d. N(0, 1), as in Godey et al. (2024) E5. Trains
  poorly from scratch (logits of size ~sqrt(r·d)) but is what the paper used.
- ``scaled``: B ~ N(0, 1/d) (so h·Bᵀ has unit-scale coordinates) and
  A ~ N(0, init_std²·d/r), giving Var(W_ij) = init_std² like a dense head.

Exported to Hugging Face as the dense product A·B (same function; the factors are lost).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, ClassVar

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from sbjax.errors import bounded, config_error
from sbjax.heads.base import HEAD_KEY, HeadConfig, HeadKind, register
from sbjax.precision import matmul_precision

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig

INITS = ("scaled", "godey")


@dataclasses.dataclass(frozen=True)
class LowRankHead(HeadConfig):
  """W = A·B of rank ``rank`` (1 .. d_model, required); ``init``: scaled | godey."""

  kind: ClassVar[str] = "lowrank"
  rank: int = 0
  init: str = bounded("scaled", choices=INITS)


def factor_inits(c, r: int):
  """The initializers of A (V×r) and B (r×d) of a rank-``r`` head under ``c.head.init``
  (module docstring); ``sbjax.heads.padded_lowrank`` draws its first r columns with them."""
  if c.head.init == "godey":
    return nn.initializers.normal(1.0), nn.initializers.normal(1.0)
  return (nn.initializers.normal(c.init_std * math.sqrt(c.d_model / r)),
          nn.initializers.normal(1.0 / math.sqrt(c.d_model)))


def factor_scores(h, a, b, c):
  """scores = (h·Bᵀ)·Aᵀ at the config's matmul precision (the V×d product is never formed)."""
  prec = matmul_precision(c)
  z = jnp.einsum("...d,rd->...r", h, b.astype(h.dtype), precision=prec)  # h·Bᵀ, then ·Aᵀ
  return jnp.einsum("...r,vr->...v", z, a.astype(h.dtype), precision=prec)


class _LowRankModule(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    r = c.rank
    a_init, b_init = factor_inits(c, r)
    a = self.param("a", a_init, (c.vocab_size, r), jnp.dtype(c.param_dtype))
    b = self.param("b", b_init, (r, c.d_model), jnp.dtype(c.param_dtype))
    return factor_scores(h, a, b, c)


class LowRank(HeadKind):
  name = "lowrank"
  order = 2
  # A (V×r): vocab on tensor, r on fsdp; B (r×D): D on fsdp (the B×T×r bottleneck is tiny)
  leaf_specs = {"a": ("tensor", "fsdp"), "b": (None, "fsdp")}
  config = LowRankHead
  hf_tied = False

  def module(self, cfg):
    return _LowRankModule(cfg, name=HEAD_KEY)

  def factors(self, params, h, cfg):
    """(h·Bᵀ, A): the rank-r features first, so the V×d product A·B is never formed."""
    hp = params[HEAD_KEY]
    return (jnp.einsum("...d,rd->...r", h, hp["b"].astype(h.dtype),
                       precision=matmul_precision(cfg)), hp["a"])

  def matrix(self, params, cfg):
    hp = params[HEAD_KEY]
    # the weights' own product (analysis, HF export): full precision whatever the policy
    return jnp.matmul(hp["a"], hp["b"], precision=lax.Precision.HIGHEST)

  def param_count(self, cfg) -> int:
    return cfg.vocab_size * cfg.rank + cfg.rank * cfg.d_model

  def validate(self, cfg) -> None:
    r = cfg.head.rank
    if not 1 <= r <= cfg.d_model:
      raise config_error("model.head.rank", r,
                    f"1 .. d_model={cfg.d_model} (a lowrank head needs an explicit rank; "
                    "use head=dense for full rank without factors)")

  def rank(self, cfg) -> int:
    return cfg.head.rank or cfg.d_model


register(LowRank())
