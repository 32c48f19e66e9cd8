"""The planted experiment's measurement of a trained model: the sampled validation loss and
its Rao-Blackwellised form against the language's exact next-token distributions."""

from __future__ import annotations

import functools

import jax
import numpy as np

from sbjax.model import Model
from sbjax.losses import context_ids


def context_index(tokens: np.ndarray, n: int, vocab: int) -> np.ndarray:
  """Context index of every position t >= n-1 of windows [B, T] (the last n tokens up to t);
  -1 where fewer than n tokens are visible (``sbjax.losses.context_ids``, the
  training loss's indexing, as int64)."""
  return np.asarray(context_ids(np.asarray(tokens), n, vocab), np.int64)


def expected_nll_sum(logq: np.ndarray, x: np.ndarray, lang) -> tuple[float, int]:
  """(Σ_t Σ_w P(w|c_t)(−log q_t(w)), number of positions) over positions with a full context;
  ``logq`` [B, T, V] are the model's log-probs after inputs ``x`` [B, T]."""
  c = context_index(x, lang.context, lang.vocab)
  ok = c >= 0
  return float(-(lang.probs[c[ok]] * logq[ok]).sum()), int(ok.sum())


SELECT_STREAM = 3  # the selection stream's key [language seed, 3]: train is 1, validation 2


def selection_batches(lang, n: int, batch: int, seq_len: int, seed: int) -> list[np.ndarray]:
  """n batches [batch, seq_len + 1] of the selection stream: ``n * batch`` independent chains
  of the language, each from its stationary distribution, sampled with the key
  [seed, SELECT_STREAM], which neither the training nor the validation stream uses
  (``sbjax.data.dataset.build_planted``)."""
  x = lang.sample([int(seed), SELECT_STREAM], (int(n) * int(batch), int(seq_len) + 1))
  return [np.asarray(b, np.int32) for b in np.split(x, int(n))]


@functools.lru_cache(maxsize=8)
def logp_fn(model_cfg):
  """The jitted log-probs of a model config, compiled once for every run of that shape."""
  model = Model(model_cfg)
  return jax.jit(lambda p, x: jax.nn.log_softmax(model.apply(p, x), axis=-1))


def measure(cfg, params, lang, batches) -> dict:
  """eval_loss, eval_acc (sampled targets) and expected_loss (Rao-Blackwellised) on batches
  [B, T+1]: expected_loss = mean over positions of Σ_w P(w|c_t) (−log q_t(w))."""
  logp = logp_fn(cfg.model)
  nll, acc, rb, n_rb = [], [], 0.0, 0
  for b in batches:
    x, y = b[:, :-1], b[:, 1:]
    lq = np.asarray(logp(params, x), np.float64)
    nll.append(-np.take_along_axis(lq, y[..., None], -1)[..., 0])
    acc.append(lq.argmax(-1) == y)
    s, n = expected_nll_sum(lq, x, lang)
    rb, n_rb = rb + s, n_rb + n
  return {"eval_loss": float(np.mean(nll)), "eval_acc": float(np.mean(acc)),
          "expected_loss": rb / n_rb}
