r"""The exact bigram r*(V, N): is the bigram's r* a property of the language or of the data
size? (issue 33, item 3).

At each V (one sentencepiece tokenizer each, as the trained sweeps) and each data fraction f of
the training tokens, the add-k smoothed bigram of that fraction's counts (``ngram_floor``) is
fitted at rank r to ``gtol`` (``sbjax.studies.bigram_fit``: the fit records its tangent gradient,
iterations and its last-100-iteration drift, and says when it did not converge), scored on the
*whole* validation stream's counts, and

    r*(V, N) = the smallest grid rank with val(r) ≤ val_full + tol_token,
    tol_token = TOL_CHAR · c(V)   (the trained r*'s per-character tolerance, tolerance.py),

searched by ``sbjax.studies.bigram_rstar.gallop`` from the r* of the previous fraction (fits
warm-started from the nearest fitted rank, or from the previous fraction's fit at that rank).

The fractions are nested and spread over the corpus: the train stream is cut into blocks of
``block`` tokens and fraction k/period keeps the blocks whose index mod ``period`` is < k; a
bigram pair never crosses two kept blocks (each block is its own stream).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from sbjax.studies import bigram_fit as bf
from sbjax.studies import ngram_floor as nf
from sbjax.studies.bigram_rstar import gallop


@dataclasses.dataclass(frozen=True)
class BigramNKnobs:
  fractions: tuple  # data fractions k/period of the train tokens (ascending, nested)
  grid: tuple  # the rank grid r* is read on (its largest rank: where r* is censored)
  max_iters: tuple  # L-BFGS iteration cap per fit, one per V of the preset (the cost knob)
  guess: int = 64  # the first search's starting rank (later: the previous fraction's r*)
  add_k: float = 0.1  # add-k smoothing of the train counts (as ngram.py)
  gtol: float = 1e-5  # tangent-gradient tolerance of a converged fit
  period: int = 4  # fractions are multiples of 1/period
  block: int = 2048  # tokens per block of the nested fractions

  def __post_init__(self):
    for f in self.fractions:
      if not (0 < f <= 1 and abs(f * self.period - round(f * self.period)) < 1e-9):
        raise ValueError(f"bigram-n: fraction {f} is not k/{self.period} with 0 < k <= "
                         f"{self.period}; use multiples of 1/{self.period}")


def fraction_streams(tokens, frac: float, period: int = 4, block: int = 2048) -> list:
  """The blocks (of ``block`` tokens) whose index mod ``period`` < frac·period, one stream
  each: nested in frac, spread over the whole stream."""
  tokens = np.asarray(tokens)
  k = int(round(frac * period))
  starts = range(0, len(tokens), block)
  return [tokens[s:s + block] for i, s in enumerate(starts) if i % period < k]


def _row(res: bf.Fit, targets: dict, tol: float, seconds: float) -> dict:
  val = nf.score(res.X @ res.Y.T, targets["pv"], targets["piv"])
  return {"rank": res.rank, "start": res.start, "train_floor": res.value,
          "train_H": targets["H"], "val": val, "val_full": targets["full"],
          "val_excess": val - targets["full"], "tol_token": tol,
          "ok": int(val - targets["full"] <= tol), "converged": int(res.converged),
          "grad_norm": res.grad_norm, "n_iter": res.n_iter, "drift": res.drift,
          "coverage": targets["cov"], "n_contexts": len(targets["ctx"]),
          "cpu_s": round(seconds, 2)}


def targets_of(streams, val_tokens, vocab: int, add_k: float) -> dict:
  """The smoothed train bigram, the validation counts on its contexts, val_full and H."""
  p, pi, ctx = nf.smoothed(streams, vocab, 1, add_k)
  pv, piv, cov = nf.validation_targets(val_tokens, ctx, vocab, 1)
  return {"p": p, "pi": pi, "ctx": ctx, "pv": pv, "piv": piv, "cov": cov,
          "full": nf.score(np.log(p), pv, piv), "H": bf.fl.entropy(p, pi)}


def cell(t: dict, knobs: BigramNKnobs, tol: float, guess: int, max_iter: int,
         prior: tuple | None = None, log=lambda s: None) -> tuple:
  """(fit rows, Search, fits) of one (V, fraction): the galloping search, each rank fitted to
  gtol. ``prior`` = (contexts, {rank: Fit}) of the previous fraction (warm starts)."""
  fits, rows = {}, []

  def ok(r: int) -> bool:
    old = prior[1].get(r) if prior else None
    if old is not None:
      old = dataclasses.replace(old, X=bf.map_contexts(old.X, prior[0], t["ctx"]))
    name, x, y = bf.start_for(t["p"], t["pi"], r, fits, old)
    c0 = time.process_time()
    fits[r] = bf.fit(t["p"], t["pi"], x, y, gtol=knobs.gtol, max_iter=max_iter, start=name)
    rows.append(_row(fits[r], t, tol, time.process_time() - c0))
    x = rows[-1]
    log(f"  r={r} ({name}): val excess {x['val_excess']:+.4f} (tol {tol:.4f}), grad "
        f"{x['grad_norm']:.2e}, {x['n_iter']} it, {x['cpu_s']} s CPU")
    return bool(x["ok"])

  return rows, gallop(ok, knobs.grid, guess), fits


def run_v(train_tokens, val_tokens, vocab: int, cpt: float, knobs: BigramNKnobs,
          tol_char: float, max_iter: int, guess: int, log=lambda s: None,
          on_cell=lambda fits, cells: None) -> tuple:
  """(fit rows, cell rows) of one V over the knobs' fractions (ascending); ``on_cell`` sees
  both after every cell (to write them as they come)."""
  tol = tol_char * cpt
  fit_rows, cells, prior = [], [], None
  for f in sorted(knobs.fractions):
    streams = fraction_streams(train_tokens, f, knobs.period, knobs.block)
    n_tok = int(sum(len(s) for s in streams))
    c0 = time.process_time()
    t = targets_of(streams, val_tokens, vocab, knobs.add_k)
    rows, s, fits = cell(t, knobs, tol, guess, max_iter, prior, log)
    head = {"V": int(vocab), "fraction": f, "train_tokens": n_tok}
    fit_rows += [{**head, **r} for r in rows]
    at = {r["rank"]: r for r in rows}
    top = at[s.r_star if s.r_star is not None else max(at)]
    decisive = [at[r] for r in (s.r_star, s.lo) if r in at]
    cells.append({**head, "chars_per_token": cpt, "tol_token": tol,
                  "r_star": top["rank"], "lo": s.lo, "censored": int(s.censored),
                  "decisive_converged": int(all(r["converged"] for r in decisive)),
                  "all_converged": int(all(r["converged"] for r in rows)),
                  "max_grad_norm": max(r["grad_norm"] for r in rows),
                  "max_n_iter": max(r["n_iter"] for r in rows), "n_fits": len(rows),
                  "evaluated": " ".join(map(str, s.evaluated)), "val_full": t["full"],
                  "val_excess_at_r_star": top["val_excess"], "coverage": t["cov"],
                  "n_contexts": len(t["ctx"]), "max_iter": max_iter,
                  "cpu_s": round(time.process_time() - c0, 1)})
    log(f"V={vocab} f={f}: r*={top['rank']} (lo {s.lo}, censored {int(s.censored)}), "
        f"fits {s.evaluated}, {cells[-1]['cpu_s']} s CPU")
    guess, prior = top["rank"], (t["ctx"], fits)
    on_cell(fit_rows, cells)
  return fit_rows, cells
