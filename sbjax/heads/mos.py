"""Mixture of softmaxes (Yang et al., 2018).

p(w|h) = Σ_m π_m(h) softmax(W g_m(h))_w with π(h) = softmax(h P + p0) and
g_m(h) = act(h U_m + c_m), U_m (d×e), act = tanh (``act``, default) or the identity
(``linear``); W (V×e) is shared by the components. e = ``dim`` is the
component dimension (0, the default, means e = d: the original head of Yang et al.). Computed
in log space: log p = logsumexp_m [log π_m + log_softmax(W g_m)], in float32; the scores are
these normalised log-probabilities. Parameters: V e + M d e + M e + M d + M
(e = d: V d + M d² + 2 M d + M). Config ``MoSHead(n_mix, dim, act)``.

With e = k + 1 and linear components the head represents a ``PlantedMoS`` language exactly
(``sbjax.data.planted_mos``: W = [αY/√k, b], U_m, c_m giving g_m = [R_m u_c, 1]).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from sbjax.errors import bounded
from sbjax.heads.base import HEAD_KEY, HeadConfig, HeadKind, register
from sbjax.precision import matmul_precision

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig


ACTS = ("tanh", "linear")


@dataclasses.dataclass(frozen=True)
class MoSHead(HeadConfig):
  """``n_mix`` components of dimension ``dim`` (0 = d_model) with activation ``act``."""

  kind: ClassVar[str] = "mos"
  n_mix: int = bounded(1, lo=1)
  dim: int = bounded(0, lo=0, note="0 = d_model")  # the components' dimension e
  act: str = bounded("tanh", choices=ACTS)


def component_dim(cfg) -> int:
  """e: the head's ``dim``, or d_model when it is 0."""
  return cfg.head.dim or cfg.d_model


class _MoSModule(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    m, d, e = c.head.n_mix, c.d_model, component_dim(c)
    pd = jnp.dtype(c.param_dtype)
    init = nn.initializers.normal(c.init_std)
    prior_w = self.param("prior_w", init, (d, m), pd)
    prior_b = self.param("prior_b", nn.initializers.zeros, (m,), pd)
    proj_w = self.param("proj_w", init, (d, m, e), pd)
    proj_b = self.param("proj_b", nn.initializers.zeros, (m, e), pd)
    w = self.param("w", init, (c.vocab_size, e), pd)
    dt, prec = h.dtype, matmul_precision(c)
    log_prior = jax.nn.log_softmax(
        (jnp.einsum("...d,dm->...m", h, prior_w.astype(dt), precision=prec) + prior_b.astype(dt))
        .astype(jnp.float32), axis=-1)
    g = jnp.einsum("...d,dme->...me", h, proj_w.astype(dt), precision=prec) + proj_b.astype(dt)
    g = jnp.tanh(g) if c.head.act == "tanh" else g
    logits = jnp.einsum("...me,ve->...mv", g, w.astype(dt), precision=prec).astype(jnp.float32)
    comp = jax.nn.log_softmax(logits, axis=-1)
    return jax.nn.logsumexp(comp + log_prior[..., None], axis=-2)


class MoS(HeadKind):
  name = "mos"
  description = "a mixture-of-softmaxes head"
  order = 3
  # the shared W as the dense head; the prior P (D×M) and projections U (D×M×D) have
  # their input D on fsdp; the biases are replicated
  leaf_specs = {"w": ("tensor", "fsdp"), "prior_w": ("fsdp", None),
                "proj_w": ("fsdp", None, None), "prior_b": (), "proj_b": ()}
  config = MoSHead
  rank_limited = False

  def module(self, cfg):
    return _MoSModule(cfg, name=HEAD_KEY)

  def matrix(self, params, cfg):
    return params[HEAD_KEY]["w"]  # the shared output matrix (V×e)

  def param_count(self, cfg) -> int:
    v, d, m, e = cfg.vocab_size, cfg.d_model, cfg.head.n_mix, component_dim(cfg)
    return d * m + m + d * m * e + m * e + v * e

  def flop_params(self, cfg) -> int:
    # the forward's multiply-adds per token: the prior h·P (d M), the projections h·U_m
    # (d M e) and the M logit sets W·g_m (M e V): the shared W is applied once per component
    v, d, m, e = cfg.vocab_size, cfg.d_model, cfg.head.n_mix, component_dim(cfg)
    return d * m + d * m * e + m * e * v

  def rank(self, cfg) -> int:
    return component_dim(cfg)


register(MoS())
