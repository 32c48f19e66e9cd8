"""Pluggable LM heads: dense, tied, low-rank (W = A·B) and mixture of softmaxes.

Every head maps final-norm features ``h_BxLxD`` to scores over the vocabulary and
exposes the effective V×d matrix for spectral analysis:

- ``apply_head(params, h, cfg)`` -> ``(scores, is_logprob)``: logits for dense, tied
  and lowrank heads; normalised log-probabilities for ``mos``. Either way
  ``log_softmax(scores)`` gives the model's log-probabilities (log_softmax of a
  normalised log-distribution is the identity), always computed in float32.
- ``head_matrix(params, cfg)`` -> the V×d matrix W whose rank limits the logits:
  the dense kernel, the input embedding (tied), the product A·B (lowrank), or the
  shared output matrix (mos).

``params`` here is the *model's* parameter pytree (the tied head needs the input
embedding). The head's own parameters live under ``params["head"]``.

Low-rank inits:
- ``godey``: A and B entries i.i.d. N(0, 1), as in Godey et al. (2024) E5. Trains
  poorly from scratch (logits of size ~sqrt(r·d)) but is what the paper used.
- ``scaled``: B ~ N(0, 1/d) (so h·Bᵀ has unit-scale coordinates) and
  A ~ N(0, init_std²·d/r), giving Var(W_ij) = init_std² like a dense head.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from sbjax.config import ModelConfig


def _dtype(name: str):
  return jnp.dtype(name)


class DenseHead(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    w = self.param("w", nn.initializers.normal(c.init_std), (c.vocab_size, c.d_model),
                   _dtype(c.param_dtype))
    return jnp.einsum("...d,vd->...v", h, w.astype(h.dtype))


class LowRankHead(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    r = c.rank
    if c.head_init == "godey":
      a_init, b_init = nn.initializers.normal(1.0), nn.initializers.normal(1.0)
    else:
      a_init = nn.initializers.normal(c.init_std * math.sqrt(c.d_model / r))
      b_init = nn.initializers.normal(1.0 / math.sqrt(c.d_model))
    a = self.param("a", a_init, (c.vocab_size, r), _dtype(c.param_dtype))
    b = self.param("b", b_init, (r, c.d_model), _dtype(c.param_dtype))
    z = jnp.einsum("...d,rd->...r", h, b.astype(h.dtype))  # h·Bᵀ first: O(r·d), then ·Aᵀ
    return jnp.einsum("...r,vr->...v", z, a.astype(h.dtype))


class MoSHead(nn.Module):
  """Mixture of softmaxes (Yang et al., 2018).

  p(w|h) = Σ_m π_m(h) softmax(W g_m(h))_w with π(h) = softmax(h P + p0) and
  g_m(h) = tanh(h U_m + c_m); W (V×d) is shared by the components. Computed in
  log space: log p = logsumexp_m [log π_m + log_softmax(W g_m)], in float32.
  """

  cfg: ModelConfig

  @nn.compact
  def __call__(self, h):
    c = self.cfg
    m, d = c.n_mix, c.d_model
    pd = _dtype(c.param_dtype)
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


def make_head(cfg: ModelConfig):
  """The head module for cfg.head, or None for a tied head (it uses the embedding)."""
  if cfg.head == "dense":
    return DenseHead(cfg, name="head")
  if cfg.head == "lowrank":
    return LowRankHead(cfg, name="head")
  if cfg.head == "mos":
    return MoSHead(cfg, name="head")
  if cfg.head == "tied":
    return None
  raise ValueError(f"invalid config: model.head={cfg.head!r}; allowed: dense | tied | lowrank | mos")


def matrix_factors(params, h, cfg: ModelConfig):
  """(x, M) with scores = x·Mᵀ for the matrix heads, so a loss can chunk over tokens:
  dense (h, W), tied (h, embed), lowrank (h·Bᵀ, A), the rank-r features first, so the
  V×d product A·B is never formed. None for mos (not a single matrix product)."""
  if cfg.head == "tied":
    return h, params["embed"]
  hp = params["head"]
  if cfg.head == "dense":
    return h, hp["w"]
  if cfg.head == "lowrank":
    return jnp.einsum("...d,rd->...r", h, hp["b"].astype(h.dtype)), hp["a"]
  return None


def scores_fn(params, cfg: ModelConfig):
  """h -> scores of the head (logits, or log-probs for mos), params closed over."""
  if cfg.head == "tied":
    emb = params["embed"]
    return lambda h: jnp.einsum("...d,vd->...v", h, emb.astype(h.dtype))
  mod = make_head(cfg)
  return lambda h: mod.apply({"params": params["head"]}, h)


def is_logprob(cfg: ModelConfig) -> bool:
  return cfg.head == "mos"


def head_matrix(params, cfg: ModelConfig) -> jax.Array:
  """The effective V×d head matrix W of a model's params (for spectra and NC3)."""
  if cfg.head == "tied":
    return params["embed"]
  hp = params["head"]
  if cfg.head == "dense":
    return hp["w"]
  if cfg.head == "lowrank":
    return hp["a"] @ hp["b"]
  if cfg.head == "mos":
    return hp["w"]
  raise ValueError(f"invalid config: model.head={cfg.head!r}")


def head_param_count(cfg: ModelConfig) -> int:
  """Number of parameters in the head (0 for tied), for equal-budget comparisons."""
  v, d = cfg.vocab_size, cfg.d_model
  if cfg.head == "dense":
    return v * d
  if cfg.head == "tied":
    return 0
  if cfg.head == "lowrank":
    return v * cfg.rank + cfg.rank * d
  m = cfg.n_mix
  return d * m + m + d * m * d + m * d + v * d
