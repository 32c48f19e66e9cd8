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
Each cell's decisive fit nearest the tolerance is then fitted again from a second, independent
start (``bigram_n_check``: the start check); a cell whose pass/fail flips is unreliable.

The fractions are nested and spread over the corpus: the train stream is cut into blocks of
``block`` tokens and fraction k/period keeps the blocks whose index mod ``period`` is < k; a
bigram pair never crosses two kept blocks (each block is its own stream).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from sbjax.studies import bigram_fit as bf
from sbjax.studies import ngram_floor as nf
from sbjax.studies.bigram_rstar import Search, gallop
from . import bigram_n_check as ck


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
  check: int = 1  # start check: decisive ranks refitted from a second start per cell (0: off,
  # 1: the one nearest the tolerance, 2: both; bigram_n_check.py)
  check_cap: float = 2.0  # the second fit's iteration cap, x the V's: its start is cold, the
  # search's are warm (session 15: an svd refit at V = 1024, r = 32 stopped at 1500, grad 4.5e-5)

  def __post_init__(self):
    for f in self.fractions:
      if not (0 < f <= 1 and abs(f * self.period - round(f * self.period)) < 1e-9):
        raise ValueError(f"bigram-n: fraction {f} is not k/{self.period} with 0 < k <= "
                         f"{self.period}; use multiples of 1/{self.period}")
    if self.check_cap < 1:
      raise ValueError(f"bigram-n: check_cap={self.check_cap} must be >= 1 (the second fit's "
                       "iteration cap as a multiple of the search's)")
    if self.check not in (0, 1, 2):
      raise ValueError(f"bigram-n: check={self.check} must be 0 (off), 1 (the decisive rank "
                       "nearest the tolerance) or 2 (both decisive ranks)")


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


def check_cap(knobs: BigramNKnobs, max_iter: int) -> int:
  """The start check's iteration cap at a V whose search fits are capped at ``max_iter``."""
  return int(round(knobs.check_cap * max_iter))


def _check(t: dict, knobs: BigramNKnobs, tol: float, max_iter: int, first: dict, s,
           log=lambda s: None) -> list:
  """The start check's fit rows (``bigram_n_check``): the decisive ranks nearest the tolerance
  fitted again from a second start."""
  rows = []
  for r in ck.pick(first, s.r_star, s.lo, tol, knobs.check):
    name, x, y = ck.second_start(t["p"], t["pi"], r, str(first[r]["start"]))
    c0 = time.process_time()
    res = bf.fit(t["p"], t["pi"], x, y, gtol=knobs.gtol, start=name,
                 max_iter=check_cap(knobs, max_iter))
    rows.append(_row(res, t, tol, time.process_time() - c0))
    x = rows[-1]
    log(f"  check r={r} ({name}): val excess {x['val_excess']:+.4f} (search "
        f"{float(first[r]['val_excess']):+.4f}), grad {x['grad_norm']:.2e}, {x['n_iter']} it, "
        f"{x['cpu_s']} s CPU")
  return rows


def _reused(old: tuple, t: dict, vocab: int, f: float) -> tuple:
  """(search rows, Search) of a cell already searched in an earlier run of the same preset
  (``old`` = (cell row, its fit rows)), after checking that its target is this one."""
  c, rows = old
  if not math.isclose(float(c["val_full"]), t["full"], rel_tol=1e-9, abs_tol=0.0):
    raise ValueError(f"bigram-n: the earlier run's cell V={vocab}, f={f} has val_full "
                     f"{float(c['val_full'])!r}, this target's is {t['full']!r}; use a fresh "
                     "--out (its CSVs come from other data or knobs)")
  cens = int(c["censored"])
  ev = tuple(int(r) for r in str(c["evaluated"]).split())
  return rows, Search(None if cens else int(c["r_star"]), int(c["lo"]), ev)


def _cell_row(head: dict, rows: list, s, checks: list, t: dict, cpt: float, tol: float,
              max_iter: int) -> dict:
  at = {int(r["rank"]): r for r in rows}
  top = at[s.r_star if s.r_star is not None else max(at)]
  dec_ok = all(int(at[r]["converged"]) for r in ck.decisive_ranks(s.r_star, s.lo) if r in at)
  return {**head, "chars_per_token": cpt, "tol_token": tol, "r_star": int(top["rank"]),
          "lo": s.lo, "censored": int(s.censored), "decisive_converged": int(dec_ok),
          "all_converged": int(all(int(r["converged"]) for r in rows)),
          "max_grad_norm": max(float(r["grad_norm"]) for r in rows),
          "max_n_iter": max(int(r["n_iter"]) for r in rows), "n_fits": len(rows),
          "evaluated": " ".join(map(str, s.evaluated)), "val_full": t["full"],
          "val_excess_at_r_star": float(top["val_excess"]), "coverage": t["cov"],
          "n_contexts": len(t["ctx"]), "max_iter": max_iter,
          **ck.columns(at, checks, s.r_star, s.lo, dec_ok)}


def run_v(train_tokens, val_tokens, vocab: int, cpt: float, knobs: BigramNKnobs,
          tol_char: float, max_iter: int, guess: int, log=lambda s: None,
          on_cell=lambda fits, checks, cells: None, done: dict | None = None) -> tuple:
  """(fit rows, check rows, cell rows) of one V over the knobs' fractions (ascending), each
  cell searched and then start-checked (``bigram_n_check``). ``done`` maps (V, fraction) to
  (cell row, fit rows, check rows, reuse the checks?) of an earlier run of the same preset
  (``bigram_n_run.earlier``): those cells are not searched again (their next fraction then
  starts cold), only checked unless their checks are reused. ``on_cell`` sees the rows after
  every cell (to write them as they come)."""
  tol, done = tol_char * cpt, done or {}
  fit_rows, check_rows, cells, prior = [], [], [], None
  for f in sorted(knobs.fractions):
    streams = fraction_streams(train_tokens, f, knobs.period, knobs.block)
    head = {"V": int(vocab), "fraction": f, "train_tokens": int(sum(len(x) for x in streams))}
    c0 = time.process_time()
    t = targets_of(streams, val_tokens, vocab, knobs.add_k)
    old = done.get((int(vocab), f))
    if old is not None:
      rows, s = _reused(old[:2], t, vocab, f)
      fits, reuse = {}, " (search reused from the earlier run)"
    else:
      rows, s, fits = cell(t, knobs, tol, guess, max_iter, prior, log)
      rows, reuse = [{**head, **r} for r in rows], ""
    checks = old[2] if old is not None and old[3] else [
        {**head, **r} for r in _check(t, knobs, tol, max_iter,
                                      {int(r["rank"]): r for r in rows}, s, log)]
    fit_rows, check_rows = fit_rows + rows, check_rows + checks
    cells.append({**_cell_row(head, rows, s, checks, t, cpt, tol, max_iter),
                  "cpu_s": round(time.process_time() - c0, 1)})
    log(f"V={vocab} f={f}: r*={cells[-1]['r_star']} (lo {s.lo}, censored {int(s.censored)}), "
        f"fits {s.evaluated}{reuse}, start check {cells[-1]['start_check']}, "
        f"{cells[-1]['cpu_s']} s CPU")
    guess, prior = cells[-1]["r_star"], ((t["ctx"], fits) if fits else None)
    on_cell(fit_rows, check_rows, cells)
  return fit_rows, check_rows, cells
