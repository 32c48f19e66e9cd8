"""The padded low-rank head: a rank-``rank`` head W = A·B stored in factors of width ``pad``,
A (V×pad) and B (pad×d), whose columns of A and rows of B at index ≥ ``rank`` are zero, so that
heads of different ranks have one shape and train as the members of ONE vmapped run
(``sbjax.train.members``: the members may differ in ``rank``; pad = the largest rank).

Equal to the ``lowrank`` head of rank r = ``rank``: A[:, :r] and B[:r] are drawn as a rank-r
``lowrank`` head draws A and B (same initializers, shapes and keys, so the same values), the
padding is zero; the padding's terms of the scores are exact zeros; and with A_j = B_j = 0
both gradients are exactly zero (∂L/∂A_j = Σ g (h·B_jᵀ), ∂L/∂B_j = Σ (g·A_j) h), which AdamW
maps to a zero update: the padding stays exactly zero (``padding_is_zero``) and the first r
columns follow the rank-r head's trajectory. ``param_count`` counts the stored factors
(V·pad + pad·d); ``rank`` is r. Not exported to Hugging Face (export the rank-r lowrank run).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from sbjax.errors import bounded, config_error
from sbjax.heads.base import HEAD_KEY, HeadConfig, register
from sbjax.heads.lowrank import INITS, LowRank, factor_inits, factor_scores

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig

@dataclasses.dataclass(frozen=True)
class PaddedLowRankHead(HeadConfig):
  """A rank-``rank`` head in factors of width ``pad`` (both 1 .. d_model, rank ≤ pad)."""

  kind: ClassVar[str] = "padded_lowrank"
  rank: int = 0
  pad: int = 0
  init: str = bounded("scaled", choices=INITS)


def _padded(init, shape, axis: int, width: int):
  """An initializer of ``shape`` padded with zeros along ``axis`` to ``width``."""

  def fn(key, dtype):
    x = init(key, shape, dtype)
    widths = [(0, 0)] * len(shape)
    widths[axis] = (0, width - shape[axis])
    return jnp.pad(x, widths)

  return fn


class _PaddedModule(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    r, pad, dt = c.head.rank, c.head.pad, jnp.dtype(c.param_dtype)
    a_init, b_init = factor_inits(c, r)  # a rank-r lowrank head's, then zero-padded
    a = self.param("a", _padded(a_init, (c.vocab_size, r), 1, pad), dt)
    b = self.param("b", _padded(b_init, (r, c.d_model), 0, pad), dt)
    return factor_scores(h, a, b, c)


def padding_is_zero(params, cfg) -> bool:
  """True when A[:, rank:] and B[rank:] of ``params["head"]`` are exactly zero."""
  hp, r = params[HEAD_KEY], cfg.head.rank
  return bool(jnp.all(hp["a"][..., r:] == 0) & jnp.all(hp["b"][..., r:, :] == 0))


class PaddedLowRank(LowRank):
  """As ``lowrank`` (its factors, matrix and sharding specs: the same A·B over the pad
  columns, the padding contributing zeros), with its own config, module, count and checks."""

  name = "padded_lowrank"
  description = "a padded low-rank head"
  order = 5
  config = PaddedLowRankHead  # hf_tied None: a training device, not exported (see module doc)
  hf_tied = None
  member_varying = ("rank",)  # the members of one run may differ in it (sbjax.train.members)

  def module(self, cfg):
    return _PaddedModule(cfg, name=HEAD_KEY)

  def param_count(self, cfg) -> int:
    return cfg.vocab_size * cfg.head.pad + cfg.head.pad * cfg.d_model

  def validate(self, cfg) -> None:
    r, pad = cfg.head.rank, cfg.head.pad
    for name, v, hi in (("pad", pad, cfg.d_model), ("rank", r, pad)):
      if not 1 <= v <= hi:
        raise config_error(f"model.head.{name}", v,
                           f"1 .. {hi} (a padded_lowrank head needs 1 <= rank <= pad <= "
                           f"d_model={cfg.d_model}; pad = the largest rank of the population)")

  def rank(self, cfg) -> int:
    return cfg.head.rank


register(PaddedLowRank())
