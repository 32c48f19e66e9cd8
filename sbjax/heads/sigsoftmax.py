"""Sigsoftmax (Kanai et al., 2018): a non-mixture head whose log-probs are not low rank.

z = A (B h) + c (A: V×r, B: r×d, c: V; config ``SigSoftmaxHead(rank)`` = r, 0 means r = d), and

    p(w|h) ∝ exp(z_w) σ(z_w),   scores = z + log σ(z) = z − softplus(−z),

so log p = log_softmax(scores). The logit z has rank ≤ r + 1, but log σ(z) is a nonlinear
function of it entrywise, so the log-probability matrix over contexts is not limited to rank
r + 1 (the softmax bottleneck of Yang et al. does not apply). Parameters: V r + r d + V, so a
rank r can be chosen to match another head's parameter count. Inits as the lowrank head's
``scaled``: B ~ N(0, 1/d), A ~ N(0, init_std²·d/r), c = 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from sbjax.errors import bounded, config_error
from sbjax.heads.base import HEAD_KEY, HeadConfig, HeadKind, register
from sbjax.heads.lowrank import factor_scores

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class SigSoftmaxHead(HeadConfig):
  """A sigsoftmax head whose logit factors have rank ``rank`` (0 = d_model)."""

  kind: ClassVar[str] = "sigsoftmax"
  rank: int = bounded(0, lo=0, note="0 = d_model")


def sig_rank(cfg) -> int:
  """r: the head's ``rank``, or d_model when it is 0."""
  return cfg.head.rank or cfg.d_model


class _SigSoftmaxModule(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    r, pd = sig_rank(c), jnp.dtype(c.param_dtype)
    a = self.param("a", nn.initializers.normal(c.init_std * math.sqrt(c.d_model / r)),
                   (c.vocab_size, r), pd)
    b = self.param("b", nn.initializers.normal(1.0 / math.sqrt(c.d_model)), (r, c.d_model), pd)
    bias = self.param("bias", nn.initializers.zeros, (c.vocab_size,), pd)
    z = (factor_scores(h, a, b, c) + bias.astype(h.dtype)).astype(jnp.float32)  # A (B h) + c
    return z + jax.nn.log_sigmoid(z)


class SigSoftmax(HeadKind):
  name = "sigsoftmax"
  description = "a sigsoftmax head"
  order = 4
  # A, B as the lowrank head's; the V bias on tensor (vocab)
  leaf_specs = {"a": ("tensor", "fsdp"), "b": (None, "fsdp"), "bias": ("tensor",)}
  config = SigSoftmaxHead
  rank_limited = False

  def module(self, cfg):
    return _SigSoftmaxModule(cfg, name=HEAD_KEY)

  def matrix(self, params, cfg):
    hp = params[HEAD_KEY]
    # the V×d matrix of the logit z (before the sigmoid factor), in full precision
    return jnp.matmul(hp["a"], hp["b"], precision=lax.Precision.HIGHEST)

  def param_count(self, cfg) -> int:
    r = sig_rank(cfg)
    return cfg.vocab_size * r + r * cfg.d_model + cfg.vocab_size

  def flop_params(self, cfg) -> int:
    r = sig_rank(cfg)
    return r * cfg.d_model + cfg.vocab_size * r  # B·h then A·(B h); the bias c is no matmul

  def validate(self, cfg) -> None:
    r = cfg.head.rank
    if r > cfg.d_model:
      raise config_error("model.head.rank", r,
                    f"0 (rank d_model) or 1 .. d_model={cfg.d_model} for a sigsoftmax head")

  def rank(self, cfg) -> int:
    return sig_rank(cfg)


register(SigSoftmax())
