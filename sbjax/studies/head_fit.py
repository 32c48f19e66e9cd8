r"""Fit a head alone on the exact distributions of a planted language (no sampling, no trunk).

As ``sbjax.studies.floor`` does for rank-r logit matrices, the trunk is replaced by a free
feature ``h_c`` (d numbers) per context, so the fitted loss is the best any trunk could give
this head:

    fit(head) = min_{h, θ}  Σ_c π_c CE(P(·|c), softmax(scores_θ(h_c)))   (nats per token),

≥ H (Gibbs). The head is any registered kind (``sbjax.heads``). Optimiser: Adam (optax) on the
full batch of C contexts with a cosine decay, float32, jit-compiled. From a random start the
fit may stop above the minimum (the problem is not convex): an upper bound on min over the head.

``exact_mos(lang, cfg)``: the parameters of a MoS head (``MoSHead(n_mix=M, dim=k + 1,
act="linear")``, ``d_model ≥ k + M``) and the features ``h_c`` that reproduce a ``PlantedMoS``
language exactly:

    h_c = [u_c, log π_c, 0…],  U_m = [R_mᵀ; 0],  c_m = e_{k+1},  W = [αY/√k, b],
    prior P = [0; I_M; 0], p0 = 0,

so that ``g_m(h_c) = [R_m u_c, 1]``, ``W g_m = α (R_m u_c)·y/√k + b`` and
``log_softmax(h_c P + p0) = log π_c``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax import heads as heads_lib


@dataclasses.dataclass
class HeadFit:
  value: float  # the final Σ_c π_c CE
  best: float  # the smallest value seen during the fit
  entropy: float  # H


def exact_mos(lang, cfg):
  """(head params, h [C, d]) of a MoS head that gives ``lang.log_probs`` exactly."""
  k, m, d = lang.rank, lang.n_mix, cfg.d_model
  mp = lang.mos_parameters()
  C = lang.n_contexts
  h = np.zeros((C, d))
  h[:, :k] = lang.U
  h[:, k:k + m] = mp["log_gates"]
  proj_w = np.zeros((d, m, k + 1))
  proj_w[:k, :, :k] = np.transpose(lang.R, (2, 0, 1))  # proj_w[i, m, j] = R_m[j, i]
  proj_b = np.zeros((m, k + 1))
  proj_b[:, k] = 1.0
  prior_w = np.zeros((d, m))
  prior_w[k:k + m] = np.eye(m)
  p = {"prior_w": prior_w, "prior_b": np.zeros(m), "proj_w": proj_w, "proj_b": proj_b,
       "w": mp["w"]}
  return {name: jnp.asarray(v, jnp.float32) for name, v in p.items()}, jnp.asarray(h, jnp.float32)


def head_log_probs(head_params, h, cfg):
  """log_softmax of the head's scores for features h [C, d] (the model's log-probs)."""
  kind = heads_lib.get(cfg.head)
  return jax.nn.log_softmax(kind.scores({heads_lib.HEAD_KEY: head_params}, h, cfg), axis=-1)


def _fit(lang, cfg, steps: int, lr: float):
  """seed -> (final value, the value at every step): Adam on (θ, h) from the head's own init
  and h ~ N(0, 1)."""
  kind = heads_lib.get(cfg.head)
  p = jnp.asarray(lang.probs, jnp.float32)
  pi = jnp.asarray(lang.stationary / lang.stationary.sum(), jnp.float32)
  opt = optax.adam(optax.cosine_decay_schedule(lr, steps, 0.01))

  def loss(state):
    return -jnp.sum(pi * jnp.sum(p * head_log_probs(state[0], state[1], cfg), -1))

  def body(carry, _):
    st, os = carry
    v, g = jax.value_and_grad(loss)(st)
    upd, os = opt.update(g, os, st)
    return (optax.apply_updates(st, upd), os), v

  def one(seed):
    k1, k2 = jax.random.split(jax.random.key(seed))
    state = (kind.module(cfg).init(k1, jnp.zeros((1, cfg.d_model)))["params"],
             jax.random.normal(k2, (p.shape[0], cfg.d_model)))
    (st, _), vals = jax.lax.scan(body, (state, opt.init(state)), None, length=steps)
    return loss(st), vals

  return one


def fit_head(lang, cfg, *, steps: int = 3000, lr: float = 3e-2, seed: int = 0) -> HeadFit:
  """fit(head) of the module docstring for the head of ``cfg`` (a ``ModelConfig``)."""
  final, vals = jax.jit(_fit(lang, cfg, steps, lr))(seed)
  return HeadFit(float(final), min(float(final), float(jnp.min(vals))), float(lang.entropy))


def fit_head_starts(lang, cfg, seeds, *, steps: int = 3000, lr: float = 3e-2) -> np.ndarray:
  """``fit_head`` from every seed in ``seeds`` at once (vmapped): the final value − H of each
  start, float64 [len(seeds)]."""
  final, _ = jax.jit(jax.vmap(_fit(lang, cfg, steps, lr)))(jnp.asarray(list(seeds)))
  return np.asarray(final, np.float64) - float(lang.entropy)
