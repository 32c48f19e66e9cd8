"""Empirical next-token count matrices of n-token contexts, sparse (Godey et al. 2024, E6).

For a token stream x_0 .. x_{T-1} and a context length n, every position t >= n gives one
(context, target) pair (c_t, x_t) with c_t = (x_{t-n}, .., x_{t-1}). The count matrix is

    N[c, v] = #{t : c_t = c, x_t = v}        (C x V, scipy.sparse CSR, int64)
    n_c     = sum_v N[c, v]                  (how often context c was seen)
    P[c, v] = N[c, v] / n_c                  (the empirical next-token distribution)

Only contexts seen at least ``min_count`` times (n_c >= m) are kept. Rows are ordered by
decreasing n_c, ties by the context tokens (lexicographically), so the result is a pure
function of the tokens. Several streams (e.g. documents) may be given as a list: pairs
never cross from one stream into the next. Nothing of size C x V is ever dense: the pairs
are reduced with ``numpy.unique`` on int64 keys (the context's tokens in radix V).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import scipy.sparse as sp


@dataclasses.dataclass(frozen=True)
class NgramCounts:
  """Counts of next tokens after the kept n-token contexts (see the module docstring)."""

  counts: sp.csr_matrix  # C x V, int64
  contexts: np.ndarray  # C x n, int64
  context_counts: np.ndarray  # C, int64 (= row sums of counts)
  n: int
  vocab_size: int
  min_count: int
  n_pairs: int  # (context, target) pairs in the streams, before filtering
  n_contexts_seen: int  # distinct contexts before filtering

  @property
  def n_rows(self) -> int:
    return int(self.counts.shape[0])

  @property
  def kept_pairs(self) -> int:
    return int(self.context_counts.sum())

  def info(self) -> dict:
    return {"n": self.n, "vocab_size": self.vocab_size, "min_count": self.min_count,
            "n_pairs": self.n_pairs, "n_contexts_seen": self.n_contexts_seen,
            "n_contexts_kept": self.n_rows, "kept_pairs": self.kept_pairs,
            "nnz": int(self.counts.nnz)}


def _as_streams(tokens) -> list[np.ndarray]:
  """One stream (a 1-D array of ids) or a list of them, as int64 arrays."""
  if isinstance(tokens, np.ndarray) or (isinstance(tokens, Sequence) and tokens
                                        and np.isscalar(tokens[0])):
    tokens = [tokens]
  return [np.asarray(t).astype(np.int64, copy=False) for t in tokens]


def context_counts(tokens, n: int, min_count: int = 1, vocab_size: int | None = None
                   ) -> NgramCounts:
  """The C x V next-token counts of the n-token contexts seen >= ``min_count`` times.

  ``tokens``: a 1-D array of ids (one stream) or a list of them (pairs do not cross
  streams). ``vocab_size``: V (default: max id + 1); ids must lie in [0, V).
  """
  streams = _as_streams(tokens)
  hi = max((int(s.max()) for s in streams if s.size), default=-1)
  lo = min((int(s.min()) for s in streams if s.size), default=0)
  v = int(vocab_size) if vocab_size is not None else hi + 1
  if lo < 0 or hi >= v:
    raise ValueError(f"token ids must lie in [0, vocab_size={v}); found ids in [{lo}, {hi}]")
  wins = [np.lib.stride_tricks.sliding_window_view(s, n + 1) for s in streams if s.size > n]
  if not wins:
    raise ValueError(f"no (context, target) pairs: every stream is shorter than n+1={n + 1} "
                     "tokens; use a smaller n or more text")
  pairs = np.concatenate(wins, axis=0)  # P x (n+1)
  n_pairs = int(pairs.shape[0])
  ctx, tgt = pairs[:, :n], pairs[:, n]
  if n * np.log2(max(v, 2)) < 62:  # mixed-radix key in int64
    radix = v ** np.arange(n - 1, -1, -1, dtype=np.int64)
    keys = ctx @ radix
    uniq, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
    uctx = (uniq[:, None] // radix) % v
  else:  # V^n does not fit in int64: unique rows
    uctx, inv, cnt = np.unique(ctx, axis=0, return_inverse=True, return_counts=True)
  inv = inv.reshape(-1)
  keep = cnt >= min_count
  # rows: decreasing count, ties by the context tokens (uctx is sorted lexicographically)
  order = np.nonzero(keep)[0]
  order = order[np.argsort(-cnt[order], kind="stable")]
  row_of = np.full(cnt.shape[0], -1, np.int64)
  row_of[order] = np.arange(order.size)
  rows = row_of[inv]
  m = rows >= 0
  c = int(order.size)
  counts = sp.coo_matrix((np.ones(int(m.sum()), np.int64), (rows[m], tgt[m])), shape=(c, v))
  counts = counts.tocsr()  # sums duplicates
  counts.sort_indices()
  return NgramCounts(counts=counts, contexts=np.asarray(uctx[order], np.int64).reshape(c, n),
                     context_counts=np.asarray(cnt[order], np.int64), n=int(n), vocab_size=v,
                     min_count=int(min_count), n_pairs=n_pairs, n_contexts_seen=int(cnt.size))
