"""Planted-rank languages: Markov chains whose log-probability matrix has a known rank.

``PlantedLanguage`` is the embedded default dataset of sbjax (it needs no files). The
context ``c`` is the last ``n = context`` tokens (``C = V**n`` contexts, index
``c = sum_i tok_{t-n+i} * V**(n-1-i)``, i.e. the most recent token is the least
significant digit) and

    P(w | c)  ∝  exp(alpha * u_c . v_w / sqrt(k) + b_w),      b_w = -s * log(w + 1),

with ``u_c, v_w ~ N(0, I_k)`` drawn from ``seed`` and ``s = zipf``: token id order is
the Zipfian frequency rank. What holds exactly (and is checked in the tests):

* ``logit_matrix() = alpha U V^T / sqrt(k) + 1 b^T`` has rank <= k + 1;
* ``log_probs = L - lse 1^T`` (lse = the row log-sum-exp), so it has rank <= k + 2;
* row-centring removes the ``lse 1^T`` term: the row-centred log-probs equal the row-centred
  logits, rank <= k + 1; double-centring (rows and columns) also removes ``1 b^T``: rank <= k.

``PlantedMixture`` is the high-rank counterpart used by ``source="planted_mix"``:
``P(w|c) = sum_m pi_{c,m} softmax(alpha U_m[c] . V_m / sqrt(k) + b)`` with ``M = n_mix``
components of planted rank k each; the log of a mixture of softmaxes is not low rank, so its
log-probability matrix has a much higher numerical rank (up to min(C, V)).

Both expose ``log_probs``/``probs`` (C x V, float64), ``stationary`` (the stationary
distribution of contexts of the chain on the ``V**n`` states), ``entropy`` (exact per-token
entropy rate in nats) and ``sample``. Sampling is vectorised over independent chain
segments (see ``sample``); every segment starts from the stationary distribution, so the
marginals of every position are the stationary ones.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# C * V above this (float64 matrices of 512 MiB) is refused: keep ``context`` small.
MAX_TABLE = 1 << 26
DEFAULT_SEGMENT = 16384


def _logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
  m = np.max(x, axis=axis, keepdims=True)
  return (m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))).squeeze(axis)


def _log_softmax(x: np.ndarray) -> np.ndarray:
  return x - _logsumexp(x, -1)[..., None]


def numerical_rank(m: np.ndarray, rtol: float = 1e-9) -> int:
  """Number of singular values above ``rtol * s_max`` (float64 SVD)."""
  s = np.linalg.svd(np.asarray(m, np.float64), compute_uv=False)
  return int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0


class _MarkovLanguage:
  """Shared machinery: a Markov chain of order ``context`` given its C x V log-probs."""

  vocab: int
  context: int
  seed: int
  log_probs: np.ndarray

  def _finish(self) -> None:
    lp = self.log_probs
    self.probs = np.exp(lp)
    self.probs /= self.probs.sum(1, keepdims=True)  # exact normalisation in float64
    self._cum = np.cumsum(self.probs, axis=1)
    self._cum[:, -1] = 1.0  # guards the inverse CDF against round-off
    self.stationary = self._stationary()
    plogp = np.where(self.probs > 0, self.probs * lp, 0.0)
    self.row_entropy = -plogp.sum(1)
    self.entropy = float(self.stationary @ self.row_entropy)

  @property
  def n_contexts(self) -> int:
    return self.vocab ** self.context

  def _set(self, vocab, rank, alpha, zipf, context, seed, n_mix=None) -> None:
    """Store the parameters of every planted language (and a mixture's ``n_mix``): a
    ValueError names one outside its range, or a table over ``MAX_TABLE`` entries."""
    if vocab < 2 or not 1 <= rank <= vocab or context < 1 or (n_mix or 1) < 1:
      raise ValueError(f"invalid {type(self).__name__}: vocab={vocab} (>=2), rank={rank} "
                       f"(1..vocab), context={context} (>=1), n_mix={n_mix} (>=1)")
    self.vocab, self.rank, self.alpha, self.zipf = int(vocab), int(rank), float(alpha), float(zipf)
    self.context, self.seed = int(context), int(seed)
    if n_mix is not None:
      self.n_mix = int(n_mix)
    c = self.vocab ** self.context
    if c * self.vocab > MAX_TABLE:
      raise ValueError(
          f"planted language too large: vocab={self.vocab}, context={self.context} gives "
          f"{c} contexts x {self.vocab} tokens = {c * self.vocab} table entries (max {MAX_TABLE});"
          " use a smaller data.options.context or data.options.vocab")

  def next_context(self, c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Context after emitting token ``w`` in context ``c``."""
    return (np.asarray(c, np.int64) * self.vocab + w) % self.n_contexts

  def transition(self, pi: np.ndarray) -> np.ndarray:
    """One step of the context chain: the distribution of the next context given ``pi``."""
    if self.context == 1:
      return pi @ self.probs
    C, V = self.probs.shape
    # next context of (c, w) is (c mod V^(n-1)) * V + w: sum over the dropped leading digit.
    joint = (pi[:, None] * self.probs).reshape(V, C // V, V).sum(0)
    return joint.reshape(C)

  def _stationary_start(self) -> np.ndarray:
    """Where the power iteration of ``_stationary`` starts: for context 1 the left eigenvector
    of P for eigenvalue 1, else uniform."""
    if self.context == 1:
      w, vecs = np.linalg.eig(self.probs.T)
      v = np.real(vecs[:, np.argmin(np.abs(w - 1.0))])
      return np.abs(v) / np.abs(v).sum()
    return np.full(self.n_contexts, 1.0 / self.n_contexts)

  def _stationary(self, tol: float = 1e-14, max_iter: int = 100_000) -> np.ndarray:
    """The stationary distribution: power iteration from ``_stationary_start``, refined."""
    pi = self._stationary_start()
    for _ in range(max_iter):
      new = self.transition(pi)
      new /= new.sum()
      delta = np.abs(new - pi).sum()
      pi = new
      if delta < tol:
        break
    err = np.abs(self.transition(pi) - pi).sum()
    if err > 1e-10:
      raise RuntimeError(f"stationary distribution did not converge (L1 residual {err:.3g})")
    return pi

  def context_tokens(self, c: np.ndarray) -> np.ndarray:
    """The ``context`` tokens (oldest first) encoded by context indices ``c``: [..., n]."""
    c = np.asarray(c, np.int64)
    powers = self.vocab ** np.arange(self.context - 1, -1, -1, dtype=np.int64)
    return ((c[..., None] // powers) % self.vocab).astype(np.int32)

  def sample(self, rng, shape: int | Sequence[int], segment: int = 0) -> np.ndarray:
    """Samples tokens (int32) by the inverse CDF of the cumulative conditional probabilities.

    ``shape=(n_seqs, length)``: ``n_seqs`` independent chains, each started from the
    stationary distribution (the first ``context`` tokens are the starting context).
    ``shape=n_tokens``: one stream made of independent stationary chain segments of
    ``segment`` tokens (default ``clip(n_tokens // 64, 1024, 16384)``), concatenated
    (vectorised over segments; the Markov property is broken only at the segment
    boundaries).
    ``rng`` is a ``np.random.Generator`` or a seed (int or sequence of ints).
    """
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    if isinstance(shape, (int, np.integer)):
      n = int(shape)
      segment = int(segment) if segment else int(np.clip(n // 64, 1024, DEFAULT_SEGMENT))
      n_seg = max(1, math.ceil(n / segment))
      length = min(n, segment)
      return self.sample(rng, (n_seg, length)).reshape(-1)[:n]
    n_seqs, length = (int(s) for s in shape)
    out = np.empty((n_seqs, max(length, self.context)), np.int32)
    cum_pi = np.cumsum(self.stationary)
    cum_pi[-1] = 1.0
    c = np.searchsorted(cum_pi, rng.random(n_seqs), side="right").clip(0, self.n_contexts - 1)
    n = self.context
    out[:, :n] = self.context_tokens(c)
    u = rng.random((max(length - n, 0), n_seqs))
    for t in range(n, length):
      rows = self._cum[c]  # [n_seqs, V]
      w = (rows < u[t - n][:, None]).sum(1).clip(0, self.vocab - 1)
      out[:, t] = w
      c = self.next_context(c, w)
    return out[:, :length]

  def sequence_log_probs(self, tokens: np.ndarray) -> np.ndarray:
    """log P(x_t | previous ``context`` tokens) for t >= context of a 1-D token stream."""
    x = np.asarray(tokens, np.int64)
    n = self.context
    c = np.zeros(len(x) - n, np.int64)
    for i in range(n):
      c = c * self.vocab + x[i:len(x) - n + i]
    return self.log_probs[c, x[n:]]

  def info(self) -> dict:
    return {"vocab": self.vocab, "context": self.context, "seed": self.seed,
            "entropy_nats": self.entropy, "n_contexts": self.n_contexts}


def _zipf_bias(vocab: int, zipf: float) -> np.ndarray:
  return -float(zipf) * np.log(np.arange(1, vocab + 1, dtype=np.float64))


class PlantedLanguage(_MarkovLanguage):
  """A Markov chain whose next-token logits have planted rank ``rank`` (+1 for the bias)."""

  def __init__(self, vocab: int, rank: int, alpha: float = 4.0, zipf: float = 1.0,
               context: int = 1, seed: int = 0):
    self._set(vocab, rank, alpha, zipf, context, seed)
    rng = np.random.default_rng([self.seed, 0x5B1A])
    self.U = rng.standard_normal((self.n_contexts, self.rank))
    self.V = rng.standard_normal((self.vocab, self.rank))
    self.b = _zipf_bias(self.vocab, self.zipf)
    self.log_probs = _log_softmax(self.logit_matrix())
    self._finish()

  def logit_matrix(self) -> np.ndarray:
    """``alpha U V^T / sqrt(k) + 1 b^T`` (C x V, float64, rank <= k + 1)."""
    return self.alpha * (self.U @ self.V.T) / math.sqrt(self.rank) + self.b[None, :]

  def info(self) -> dict:
    return {"kind": "planted", "rank": self.rank, "alpha": self.alpha, "zipf": self.zipf,
            **super().info()}


class PlantedMixture(_MarkovLanguage):
  """A mixture of ``n_mix`` planted-rank softmaxes: a high-rank log-probability matrix.

  The mixture weights ``pi_{c,m} = softmax_m(g_c)`` with ``g_c ~ N(0, I_M)`` depend on the
  context. ``logit_matrix()`` returns ``log_probs`` (a logit matrix that gives exactly these
  probabilities); the component logits are ``component_logits()`` (M x C x V).
  """

  def __init__(self, vocab: int, rank: int, alpha: float = 4.0, zipf: float = 1.0,
               context: int = 1, n_mix: int = 4, seed: int = 0):
    self._set(vocab, rank, alpha, zipf, context, seed, n_mix)
    rng = np.random.default_rng([self.seed, 0x313C])
    C, M = self.n_contexts, self.n_mix
    self.U = rng.standard_normal((M, C, self.rank))
    self.V = rng.standard_normal((M, self.vocab, self.rank))
    self.gate = rng.standard_normal((C, M))
    self.b = _zipf_bias(self.vocab, self.zipf)
    self.log_probs = self._mixture_log_probs(_log_softmax(self.gate))
    self._finish()

  def _mixture_log_probs(self, log_pi: np.ndarray) -> np.ndarray:
    """log P [C, V] of the mixture with log-weights ``log_pi`` [C, M]."""
    comp = _log_softmax(self.component_logits())  # [M, C, V]
    return _logsumexp(comp + log_pi.T[:, :, None], axis=0)

  def component_logits(self) -> np.ndarray:
    return (self.alpha * np.einsum("mck,mvk->mcv", self.U, self.V) / math.sqrt(self.rank)
            + self.b[None, None, :])

  def logit_matrix(self) -> np.ndarray:
    return self.log_probs.copy()

  def info(self) -> dict:
    return {"kind": "planted_mix", "rank": self.rank, "alpha": self.alpha, "zipf": self.zipf,
            "n_mix": self.n_mix, **super().info()}
