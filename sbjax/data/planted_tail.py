r"""A planted language with a rare-token tail (``source="planted_tail"``), and how rare it is.

``PlantedTail`` is ``sbjax.data.planted.PlantedMixture`` (the same parameters draw the same
language) at the tail's sizes: V = 4096 tokens, M = 8 components of rank k = 32 and Zipf
exponent s = 1.5 (``PlantedTailOptions``' defaults), so the unigram weights fall as
(w + 1)^−1.5. Only the computation differs, so that V = 4096 builds in seconds and a few
hundred MiB (``PlantedMixture`` takes 229 s and 4.4 GiB there): the log-probabilities are
accumulated one component at a time, and the stationary distribution is found by power
iteration alone, to the same residual as the other languages.

Every position of a planted batch has the stationary token marginal
``q_w = Σ_{c: last token w} π_c``, so in N training tokens the expected count of token w is
``N q_w`` (``token_marginal``, ``rarest_token``).
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.data.planted import PlantedMixture, _log_softmax


class PlantedTail(PlantedMixture):
  """``PlantedMixture`` with the tail's defaults, built lean (module doc)."""

  def __init__(self, vocab: int = 4096, rank: int = 32, alpha: float = 4.0, zipf: float = 1.5,
               context: int = 1, n_mix: int = 8, seed: int = 0):
    super().__init__(vocab, rank, alpha, zipf, context, n_mix, seed)

  def _mixture_log_probs(self, log_pi: np.ndarray) -> np.ndarray:
    lp = None
    for m in range(self.n_mix):  # one [C, V] component at a time
      comp = _log_softmax(self.alpha * (self.U[m] @ self.V[m].T) / math.sqrt(self.rank)
                          + self.b[None, :]) + log_pi[:, m:m + 1]
      lp = comp if lp is None else np.logaddexp(lp, comp, out=lp)
    return lp

  def _stationary_start(self) -> np.ndarray:
    # one step from uniform, not the eigenvector of the V x V matrix P (not held here)
    return self.transition(np.full(self.n_contexts, 1.0 / self.n_contexts))

  def info(self) -> dict:
    return {**super().info(), "kind": "planted_tail"}


def token_marginal(lang) -> np.ndarray:
  """q_w: the stationary probability of token w at any position, [V] (module doc)."""
  return lang.stationary.reshape(-1, lang.vocab).sum(0)


def rarest_token(lang, n_tokens: int) -> dict:
  """The rarest token of a run of ``n_tokens`` tokens: its id, marginal probability q, expected
  count N q, and the Poisson approximation exp(−N q) of the chance it never occurs."""
  q = token_marginal(lang)
  w = int(np.argmin(q))
  n = float(n_tokens) * float(q[w])
  return {"token": w, "probability": float(q[w]), "expected_count": n,
          "p_absent_poisson": math.exp(-n), "n_tokens": int(n_tokens)}
