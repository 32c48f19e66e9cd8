"""Mixture of softmaxes (Yang et al., 2018).

p(w|h) = Σ_m π_m(h) softmax(W g_m(h))_w with π(h) = softmax(h P + p0) and
g_m(h) = tanh(h U_m + c_m); W (V×d) is shared by the components. Computed in log
space: log p = logsumexp_m [log π_m + log_softmax(W g_m)], in float32; the scores are
these normalised log-probabilities. Parameters: V d + M d² + 2 M d + M.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import flax.linen as nn
import jax
import jax.numpy as jnp

from sbjax.heads.base import HEAD_KEY, HeadKind, invalid, register

if TYPE_CHECKING:  # only for annotations: a head module must not import sbjax.config (base.py)
  from sbjax.config import ModelConfig


class MoSHead(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    m, d = c.n_mix, c.d_model
    pd = jnp.dtype(c.param_dtype)
    init = nn.initializers.normal(c.init_std)
    prior_w = self.param("prior_w", init, (d, m), pd)
    prior_b = self.param("prior_b", nn.initializers.zeros, (m,), pd)
    proj_w = self.param("proj_w", init, (d, m, d), pd)
    proj_b = self.param("proj_b", nn.initializers.zeros, (m, d), pd)
    w = self.param("w", init, (c.vocab_size, d), pd)
    dt = h.dtype
    log_prior = jax.nn.log_softmax(
        (jnp.einsum("...d,dm->...m", h, prior_w.astype(dt)) + prior_b.astype(dt))
        .astype(jnp.float32), axis=-1)
    g = jnp.tanh(jnp.einsum("...d,dme->...me", h, proj_w.astype(dt)) + proj_b.astype(dt))
    logits = jnp.einsum("...me,ve->...mv", g, w.astype(dt)).astype(jnp.float32)
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
  fields = ("n_mix",)

  def module(self, cfg):
    return MoSHead(cfg, name=HEAD_KEY)

  def matrix(self, params, cfg):
    return params[HEAD_KEY]["w"]  # the shared output matrix

  def param_count(self, cfg) -> int:
    v, d, m = cfg.vocab_size, cfg.d_model, cfg.n_mix
    return d * m + m + d * m * d + m * d + v * d

  def validate(self, cfg) -> None:
    if not isinstance(cfg.n_mix, int) or cfg.n_mix < 1:
      raise invalid("model.n_mix", cfg.n_mix, "an integer >= 1")


register(MoS())
