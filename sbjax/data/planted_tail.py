r"""A planted language with a rare-token tail (``source="planted_tail"``), and how rare it is.

``PlantedTail`` is the planted mixture of ``sbjax.data.planted.PlantedMixture`` (the same
parameters draw the same language),

    P(w | c) = Σ_m π_{c,m} softmax_w(α U_m[c]·V_m[w]/√k + b_w),   b_w = −s log(w + 1),

at the tail's sizes: V = 4096 tokens, M = 8 components of planted rank k = 32 and Zipf
exponent s = 1.5 (``PlantedTailOptions``' defaults), so the unigram weights fall as
(w + 1)^−1.5 and the last tokens are rare. What differs is only how it is computed, so that
V = 4096 builds in seconds and a few hundred MiB (``PlantedMixture`` takes 229 s and 4.4 GiB
there, measured: an [M, C, V] float64 array and a dense eigendecomposition):

* the log-probabilities are accumulated one component at a time
  (``log P = logaddexp_m(log π_{c,m} + log_softmax(component m))``);
* the stationary context distribution is found by power iteration alone (from the column
  mean of P), to the same L1 residual (1e-10 checked, 1e-14 targeted) as the other languages.

Its exact entropy rate ``entropy``, ``stationary`` and ``probs`` are those of every planted
language, so ``sbjax.studies.floor.floor_curve`` gives its rank floors (floor(r) ≥ H always;
the best of several starts, an upper bound on the true minimum below the exact rank).

How often the rarest token occurs: every position of a planted batch (chains started from the
stationary distribution) has the stationary token marginal ``q_w = Σ_{c: last token w} π_c``,
so in N training tokens the expected count of token w is exactly ``N q_w``
(``expected_counts``; ``rarest_token`` names the rarest one, ``types_below`` counts the types
expected fewer than a given number of times).
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.data.planted import PlantedMixture, _log_softmax, _zipf_bias


class PlantedTail(PlantedMixture):
  """``PlantedMixture`` with the tail's defaults, built lean (module doc)."""

  def __init__(self, vocab: int = 4096, rank: int = 32, alpha: float = 4.0, zipf: float = 1.5,
               context: int = 1, n_mix: int = 8, seed: int = 0):
    self._set(vocab, rank, alpha, zipf, context, seed, n_mix)
    rng = np.random.default_rng([self.seed, 0x313C])  # PlantedMixture's draws, in its order
    C, M = self.n_contexts, self.n_mix
    self.U = rng.standard_normal((M, C, self.rank))
    self.V = rng.standard_normal((M, self.vocab, self.rank))
    self.gate = rng.standard_normal((C, M))
    self.b = _zipf_bias(self.vocab, self.zipf)
    log_pi = _log_softmax(self.gate)
    lp = None
    for m in range(M):
      comp = _log_softmax(self.alpha * (self.U[m] @ self.V[m].T) / math.sqrt(self.rank)
                          + self.b[None, :]) + log_pi[:, m:m + 1]
      lp = comp if lp is None else np.logaddexp(lp, comp, out=lp)
    self.log_probs = lp
    self._finish()

  def _stationary_start(self) -> np.ndarray:
    # one step from uniform, not the eigenvector of the V x V matrix P (not held here)
    return self.transition(np.full(self.n_contexts, 1.0 / self.n_contexts))

  def component_logits(self) -> np.ndarray:
    raise NotImplementedError("PlantedTail does not hold the [M, C, V] component logits (the "
                              "memory it avoids); use PlantedMixture with the same parameters")

  def info(self) -> dict:
    return {**super().info(), "kind": "planted_tail"}


def token_marginal(lang) -> np.ndarray:
  """q_w: the stationary probability of token w at any position, [V] (module doc)."""
  return lang.stationary.reshape(-1, lang.vocab).sum(0)


def expected_counts(lang, n_tokens: int) -> np.ndarray:
  """E[count of token w] in ``n_tokens`` planted training tokens: ``n_tokens * q_w``, [V]."""
  return float(n_tokens) * token_marginal(lang)


def rarest_token(lang, n_tokens: int) -> dict:
  """The rarest token of a run of ``n_tokens`` tokens: its id, marginal probability q, expected
  count N q, and the Poisson approximation exp(−N q) of the chance it never occurs."""
  q = token_marginal(lang)
  w = int(np.argmin(q))
  n = float(n_tokens) * float(q[w])
  return {"token": w, "probability": float(q[w]), "expected_count": n,
          "p_absent_poisson": math.exp(-n), "n_tokens": int(n_tokens)}


def types_below(lang, n_tokens: int, count: float = 50.0) -> int:
  """How many token types are expected fewer than ``count`` times in ``n_tokens`` tokens."""
  return int(np.sum(expected_counts(lang, n_tokens) < count))
