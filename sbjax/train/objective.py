r"""The training objective: the sampled next-token loss, or its Rao-Blackwellised form.

``train.objective = "sampled"`` (the default) is ``Model.loss``: the mean over positions of
−log q_t(x_{t+1}), the sampled target's negative log-probability.

``train.objective = "expected"`` needs a planted language (``data.source`` planted,
planted_mix or planted_mos), whose exact next-token distribution P(·|c) of every context c is
known. The target token is replaced by its conditional expectation given the context
(Rao–Blackwell):

    L_RB = mean_{t : c_t defined}  Σ_w P(w | c_t) (−log q_t(w)),

c_t = the last ``planted_context`` tokens up to t (positions with fewer visible tokens are
left out, as in the planted experiment's measurement). Per position,
E[−log q_t(x_{t+1}) | x_{≤t}] = Σ_w P(w|c_t)(−log q_t(w)), so (by the tower property) both
losses and their gradients have the same expectation, and each RB term has no
target-sampling noise; its value minus the batch's mean entropy H(P(·|c_t)) is the mean
KL(P ‖ q) ≥ 0. ``acc`` stays the accuracy on the sampled targets.

The table P (C×V, float32) is a constant of the jitted step: C·V·4 bytes (V = 256,
context 1: 256 KiB). Formed with the full logits, so ``model.loss_chunk`` is not used.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sbjax.data import planted_mos


def context_ids(inputs_BxT, n: int, vocab: int):
  """int32 [B, T]: the index of the last n tokens up to t (sbjax.data.planted's order, most
  recent token last), −1 where fewer than n tokens are visible. int32 holds every context of
  a planted language (its table is capped at sbjax.data.planted.MAX_TABLE = 2^26 entries).
  Jittable; also the planted experiment's measurement (on numpy windows)."""
  B, T = inputs_BxT.shape
  if n > T:
    return jnp.full((B, T), -1, jnp.int32)
  acc = jnp.zeros((B, T - n + 1), jnp.int32)
  for i in range(n):
    acc = acc * vocab + inputs_BxT[:, i:T - n + 1 + i].astype(jnp.int32)
  return jnp.concatenate([jnp.full((B, n - 1), -1, jnp.int32), acc], axis=1)


def expected_loss_fn(model, probs_CxV: np.ndarray, context: int):
  """(params, batch [B, T+1]) -> (L_RB, {"loss", "acc"}): the module doc's loss."""
  probs = jnp.asarray(probs_CxV, jnp.float32)
  vocab = probs.shape[1]

  def loss(params, batch_BxT1):
    inputs, targets = batch_BxT1[:, :-1], batch_BxT1[:, 1:]
    logq_BxTxV = jax.nn.log_softmax(model.apply(params, inputs).astype(jnp.float32), axis=-1)
    c_BxT = context_ids(inputs, context, vocab)
    ok = (c_BxT >= 0).astype(jnp.float32)
    p_BxTxV = probs[jnp.maximum(c_BxT, 0)]
    ce_BxT = -jnp.sum(p_BxTxV * logq_BxTxV, axis=-1)
    value = jnp.sum(ce_BxT * ok) / jnp.maximum(jnp.sum(ok), 1.0)
    acc = (jnp.argmax(logq_BxTxV, -1) == targets).astype(jnp.float32).mean()
    return value, {"loss": value, "acc": acc}

  return loss


def loss_fn(cfg, model):
  """The loss of ``cfg.train.objective`` for ``model`` (``Model.loss`` when sampled)."""
  if cfg.train.objective == "sampled":
    return model.loss
  lang = planted_mos.from_config(cfg.data)
  if lang.vocab > cfg.model.vocab_size:
    raise ValueError(f"train.objective=expected: the planted language has {lang.vocab} tokens "
                     f"but model.vocab_size={cfg.model.vocab_size}; set model.vocab_size=0 "
                     "(from the data) or >= the language's vocabulary")
  probs = np.zeros((lang.n_contexts, cfg.model.vocab_size), np.float32)
  probs[:, :lang.vocab] = lang.probs
  return expected_loss_fn(model, probs, lang.context)
