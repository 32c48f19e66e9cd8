r"""Exact rank-r floors of smoothed n-gram next-token distributions, no training.

From a train token stream, the add-k smoothed next-token distribution of every n-token context
seen (``sbjax.studies.ngram.context_counts``),

    P_k(v | c) = (N[c, v] + k) / (n_c + k V),      weights π_c = n_c / Σ n_c,

is fitted at every rank r (``floor.rank_floor``: the svd, warm-from-the-rank-below and wide
starts, no random starts, no memory restarts: an upper bound on the train floor; ``converged``
says whether it met ``gtol``). The fitted logits are **scored on validation counts**, so that
rank spent on train sampling noise does not count:

    val(r) = Σ_c π'_c CE(P'(·|c), softmax(X_r Y_rᵀ)_c),
    P'(v|c) = N'[c, v] / n'_c,  π'_c = n'_c / Σ n'_c   (validation counts, same contexts),

beside ``val_full``, the same score of the full-rank smoothed model log P_k. Validation pairs
whose context was not kept are left out (``coverage``: the share kept). ``r_star(rows, tol)``:
the smallest rank with val(r) ≤ val_full + tol (nats per token), or None (censored).
"""

from __future__ import annotations

import numpy as np

from sbjax.studies import floor as floor_lib
from sbjax.studies.ngram import context_counts


def smoothed(train_tokens, vocab_size: int, n: int = 1, add_k: float = 0.1):
  """(P_k [C, V] dense float64, π [C], contexts [C, n]) of the train stream."""
  m = context_counts(train_tokens, n=n, vocab_size=vocab_size)
  N = m.counts.toarray().astype(np.float64)
  p = (N + add_k) / (m.context_counts[:, None] + add_k * vocab_size)
  return p, m.context_counts / m.context_counts.sum(), m.contexts


def validation_targets(val_tokens, contexts: np.ndarray, vocab_size: int, n: int = 1):
  """(P' [C, V], π' [C], coverage): validation counts on the train contexts' rows."""
  m = context_counts(val_tokens, n=n, min_count=1, vocab_size=vocab_size)
  rows = {tuple(c): i for i, c in enumerate(np.asarray(contexts).tolist())}
  N = np.zeros((len(contexts), vocab_size))
  vc = m.counts.toarray()
  for j, c in enumerate(m.contexts.tolist()):
    i = rows.get(tuple(c))
    if i is not None:
      N[i] += vc[j]
  nc = N.sum(1)
  coverage = float(nc.sum() / max(m.kept_pairs, 1))
  p = np.where(nc[:, None] > 0, N / np.maximum(nc, 1)[:, None], 1.0 / vocab_size)
  return p, nc / max(nc.sum(), 1), coverage


def score(L: np.ndarray, p: np.ndarray, pi: np.ndarray) -> float:
  """Σ_c π_c CE(P_c, softmax(L_c)) (nats per token)."""
  return floor_lib.objective(L, p, pi)[0]


def ngram_floor_rows(train_tokens, val_tokens, vocab_size: int, ranks, *, n: int = 1,
                     add_k: float = 0.1, max_iter: int = 200, gtol: float = 1e-5) -> list[dict]:
  """One row per rank: train floor, val(r), val_full, val(r) − val_full, coverage."""
  p, pi, ctx = smoothed(train_tokens, vocab_size, n, add_k)
  pv, piv, cov = validation_targets(val_tokens, ctx, vocab_size, n)
  full = score(np.log(p), pv, piv)
  out, prev = [], None
  for r in sorted({int(r) for r in ranks}):
    res = floor_lib.rank_floor(p, r, weights=pi, gtol=gtol, max_iter=max_iter, restarts=0,
                               warm=prev, n_random=0)
    prev = (res.X, res.Y)
    v = score(res.X @ res.Y.T, pv, piv)
    out.append({"rank": res.rank, "train_floor": res.value, "train_H": res.entropy,
                "val": v, "val_full": full, "val_excess": v - full, "coverage": cov,
                "converged": res.converged, "spread": res.spread, "n_contexts": len(ctx),
                "grad_norm": res.grad_norm, "n_iter": res.n_iter})
  return out


def r_star(rows, tol: float):
  """The smallest rank whose val(r) is within ``tol`` nats of val_full, or None."""
  ok = [int(r["rank"]) for r in rows if r["val_excess"] <= tol]
  return min(ok) if ok else None
