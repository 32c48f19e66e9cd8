"""The W-error of a planted language's target logits, for the exact Fig. 8 / Theorem 5.3 of
Godey et al. (2024): the exact rank-r floor (``sbjax.studies.floor``) set against how far the
target is from rank r.

The target is the C × V matrix L of log P(w|c) with the stationary context weights π_c. Three
variants, each as W-error(r) = sqrt(Σ_{i>r} σ_i²) / ‖A‖_F of its matrix A:

* ``raw``: A = L;
* ``centred``: A = L (I − 11ᵀ/V) (the softmax's per-row constant removed);
* ``weighted``: A = diag(√π) L (I − 11ᵀ/V) (each context weighted as the loss weighs it).

A planted language of rank k has a raw target of rank ≤ k + 2 and centred ones of rank ≤ k + 1.
``model_werror``: the same of a trained model's mean log q(w|c) over the positions whose
context is c (``context_means``), over the contexts seen, with π restricted to them.
"""

from __future__ import annotations

import numpy as np

VARIANTS = ("raw", "centred", "weighted")


def target_matrices(log_probs, pi) -> dict:
  """{variant: A} of the module doc from log P [C, V] and π [C] (float64)."""
  lp = np.asarray(log_probs, np.float64)
  pi = np.asarray(pi, np.float64)
  cen = lp - lp.mean(1, keepdims=True)
  return {"raw": lp, "centred": cen, "weighted": np.sqrt(pi / pi.sum())[:, None] * cen}


def werror(a, ranks) -> np.ndarray:
  """W-error(r) of matrix ``a`` at each r of ``ranks`` (numpy SVD, float64)."""
  s2 = np.linalg.svd(np.asarray(a, np.float64), compute_uv=False) ** 2
  tail = np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])  # tail[r] = Σ_{i≥r} σ_i² (0-based)
  tot = tail[0]
  r = np.minimum(np.asarray(list(ranks), np.int64), s2.size)
  return np.sqrt(np.maximum(tail[r], 0.0) / tot) if tot > 0 else np.zeros(r.shape)


def language_werror(lang, ranks) -> dict:
  """{variant: W-error at each rank} of a planted language (``log_probs``, ``stationary``)."""
  return {k: werror(a, ranks)
          for k, a in target_matrices(lang.log_probs, lang.stationary).items()}


def context_means(logq, contexts, n_contexts: int) -> tuple[np.ndarray, np.ndarray]:
  """(M [C, V], counts [C]): the mean of the rows of ``logq`` [N, V] (a model's log-probs at
  N positions) per context index in ``contexts`` [N] (entries < 0: no full context, skipped);
  rows of unseen contexts are NaN."""
  lq = np.asarray(logq, np.float64).reshape(-1, np.shape(logq)[-1])
  c = np.asarray(contexts, np.int64).reshape(-1)
  ok = c >= 0
  counts = np.bincount(c[ok], minlength=n_contexts).astype(np.int64)
  sums = np.zeros((n_contexts, lq.shape[1]))
  np.add.at(sums, c[ok], lq[ok])
  with np.errstate(invalid="ignore", divide="ignore"):
    return sums / counts[:, None], counts


def model_werror(means, counts, pi, ranks) -> dict:
  """{variant: W-error at each rank} of a trained model's mean log-probs ``means`` [C, V]
  (``context_means``) over the contexts with counts > 0, π restricted to them (module doc)."""
  seen = np.asarray(counts) > 0
  if seen.sum() < 2:
    raise ValueError(f"model W-error: {int(seen.sum())} context(s) seen; sample more positions")
  return {k: werror(a, ranks) for k, a in
          target_matrices(np.asarray(means)[seen], np.asarray(pi, np.float64)[seen]).items()}
