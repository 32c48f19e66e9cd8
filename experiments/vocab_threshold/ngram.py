r"""vocab_threshold's exact n-gram r*(V), no training (issue 18, item 7).

For each V, the add-k smoothed bigram next-token distribution of that V's *train* tokens
(``sbjax.studies.ngram_floor``: every context seen, weights = context frequency) is fitted by
rank-r logit matrices X Yᵀ (``floor.py``'s L-BFGS), and each fit is scored on the
*validation* counts: val(r). The n-gram r* is the smallest rank with

    val(r) ≤ val_full + tol_token,

val_full = the validation score of the full-rank smoothed bigram, tol_token = the same
per-character tolerance as the trained r* (TOL_CHAR · characters per token of that V), so
the two r*(V) sit side by side. None of the ranks within tolerance: censored (reported as the
largest rank tried, flagged). The cpu preset uses ``lean`` fits (svd + warm start per rank,
``max_iter`` iterations): each value is an upper bound on the train floor at that rank.
"""

from __future__ import annotations

import dataclasses

from sbjax.studies import ngram_floor as nf


@dataclasses.dataclass(frozen=True)
class NgramKnobs:
  ranks: tuple  # ranks r of the fits (the largest one is where r* is censored)
  add_k: float = 0.1  # add-k smoothing of the train counts
  max_iter: int = 40  # L-BFGS iterations per start (lean: svd + warm start per rank)
  gtol: float = 1e-5  # tangent-gradient tolerance recorded as ``converged``


def ngram_rows(train_tokens, val_tokens, vocab: int, knobs: NgramKnobs) -> list[dict]:
  """One row per rank (``ngram_floor.ngram_floor_rows``) with V added."""
  rows = nf.ngram_floor_rows(train_tokens, val_tokens, vocab, knobs.ranks, n=1,
                             add_k=knobs.add_k, lean=True, max_iter=knobs.max_iter,
                             gtol=knobs.gtol)
  return [{"V": int(vocab), **r} for r in rows]


def ngram_threshold(rows: list[dict], tol_token: float) -> dict:
  """The n-gram columns of vocab_threshold.csv: r*, censoring, val_full, the excess at r*."""
  r = nf.r_star(rows, tol_token)
  top = max(int(x["rank"]) for x in rows)
  at = {int(x["rank"]): x for x in rows}[top if r is None else r]
  return {"r_star_ngram": top if r is None else r, "ngram_censored": int(r is None),
          "ngram_val_full": at["val_full"], "ngram_excess_at_r_star": at["val_excess"],
          "ngram_converged": int(all(int(x["converged"]) for x in rows))}
