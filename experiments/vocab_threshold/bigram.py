r"""The exact bigram r* at each V, no training (``sbjax.studies.ngram_floor``): the add-k
smoothed bigram of the train tokens fitted by rank-r logit matrices and scored on the validation
counts, val(r); r* = the smallest rank with val(r) <= val_full + tol_token (val_full: the
full-rank smoothed bigram's score).

``NgramKnobs`` (beside the trained sweeps): ``lean`` fits, each an upper bound on the train
floor; none within tolerance: censored at the largest rank.

``BigramNKnobs``: r*(V, N) over nested data fractions f of the train tokens (blocks of
``block`` tokens whose index mod ``period`` < f·period). Each rank is fitted to ``gtol``
(``sbjax.studies.bigram_fit``), r* searched by ``bigram_rstar.gallop`` from the previous
fraction's r*, so r* lies in (lo, r*]. The start check: the decisive fits (at r* and lo)
nearest the tolerance (``check`` of them) fitted again from a second start with ``check_cap`` x
the cap: ``flips``, ``unconverged``, ``agrees`` or ``off``. ``se_at_r_star`` / ``se_at_lo``:
``rule.block_se`` of the per-pair differences log P_k(v|c) − log q_r(v|c) (``pair_diffs``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.special import logsumexp

from sbjax.studies import bigram_fit as bf
from sbjax.studies import floor as fl
from sbjax.studies import ngram_floor as nf
from sbjax.studies.bigram_rstar import gallop

from .rule import block_se


@dataclasses.dataclass(frozen=True)
class NgramKnobs:
  ranks: tuple  # ranks of the fits (the largest: where r* is censored)
  add_k: float = 0.1  # add-k smoothing of the train counts
  max_iter: int = 40  # L-BFGS iterations per start
  gtol: float = 1e-5  # tangent-gradient tolerance recorded as ``converged``


def ngram_columns(train, val, vocab: int, k: NgramKnobs, tol: float) -> tuple[list, dict]:
  """(one row per rank, the n-gram columns of vocab_threshold.csv)."""
  rows = [{"V": int(vocab), **r} for r in nf.ngram_floor_rows(
      train, val, vocab, k.ranks, n=1, add_k=k.add_k, max_iter=k.max_iter,
      gtol=k.gtol)]
  r, top = nf.r_star(rows, tol), max(int(x["rank"]) for x in rows)
  at = {int(x["rank"]): x for x in rows}[top if r is None else r]
  return rows, {"r_star_ngram": top if r is None else r, "ngram_censored": int(r is None),
                "ngram_val_full": at["val_full"], "ngram_excess_at_r_star": at["val_excess"],
                "ngram_converged": int(all(int(x["converged"]) for x in rows))}


@dataclasses.dataclass(frozen=True)
class BigramNKnobs:
  fractions: tuple  # data fractions k/period of the train tokens (ascending, nested)
  grid: tuple  # the rank grid r* is read on (its largest rank: where r* is censored)
  max_iters: tuple  # L-BFGS iteration cap per fit, one per V of the preset
  guess: int = 64  # the first search's starting rank (later: the previous fraction's r*)
  add_k: float = 0.1
  gtol: float = 1e-5
  period: int = 4
  block: int = 2048
  check: int = 1  # decisive fits refitted per cell (0: off, 1: the nearest the tolerance, 2)
  check_cap: float = 2.0  # the refit's iteration cap, x the V's (its start is cold)

  def __post_init__(self):
    if any(not 0 < f * self.period <= self.period or f * self.period % 1 for f in self.fractions):
      raise ValueError(f"bigram-n: fractions {self.fractions} must be k/{self.period} with "
                       f"0 < k <= {self.period}")


def fraction_streams(tokens, frac: float, period: int = 4, block: int = 2048) -> list:
  """The blocks of ``block`` tokens whose index mod ``period`` < frac·period, one stream each."""
  tokens, k = np.asarray(tokens), round(frac * period)
  return [tokens[s:s + block] for i, s in enumerate(range(0, len(tokens), block)) if i % period < k]


def targets_of(streams, val_tokens, vocab: int, add_k: float) -> dict:
  """The smoothed train bigram, the validation counts on its contexts, val_full and H."""
  p, pi, ctx = nf.smoothed(streams, vocab, 1, add_k)
  pv, piv, cov = nf.validation_targets(val_tokens, ctx, vocab, 1)
  return {"p": p, "pi": pi, "ctx": ctx, "pv": pv, "piv": piv, "cov": cov,
          "full": nf.score(np.log(p), pv, piv), "H": fl.entropy(p, pi)}


def _row(res: bf.Fit, t: dict, tol: float) -> dict:
  val = nf.score(res.X @ res.Y.T, t["pv"], t["piv"])
  return {"rank": res.rank, "start": res.start, "train_floor": res.value, "train_H": t["H"],
          "val": val, "val_full": t["full"], "val_excess": val - t["full"], "tol_token": tol,
          "ok": int(val - t["full"] <= tol), "converged": int(res.converged),
          "grad_norm": res.grad_norm, "n_iter": res.n_iter, "drift": res.drift,
          "coverage": t["cov"], "n_contexts": len(t["ctx"])}


def _search(t: dict, k: BigramNKnobs, tol: float, guess: int, cap: int, prior) -> tuple:
  """(fit rows, Search, fits) of one cell; ``prior``: (contexts, fits) of the last fraction."""
  fits, rows = {}, []

  def ok(r: int) -> bool:
    old = prior[1].get(r) if prior else None
    if old is not None:
      old = dataclasses.replace(old, X=bf.map_contexts(old.X, prior[0], t["ctx"]))
    name, x, y = bf.start_for(t["p"], t["pi"], r, fits, old)
    fits[r] = bf.fit(t["p"], t["pi"], x, y, gtol=k.gtol, max_iter=cap, start=name)
    rows.append(_row(fits[r], t, tol))
    return bool(rows[-1]["ok"])

  return rows, gallop(ok, k.grid, guess), fits


def _check(t: dict, k: BigramNKnobs, tol: float, cap: int, first: dict, s) -> tuple:
  """(the refits' rows, the cell's start-check columns)."""
  dec = [r for r in (s.r_star, s.lo) if r and r in first]
  second = []
  for r in sorted(dec, key=lambda r: (abs(first[r]["val_excess"] - tol), r))[:k.check]:
    if first[r]["start"] != "svd":
      name, x, y = "svd", *fl.svd_start(t["p"], t["pi"], r)
    else:
      rng = np.random.default_rng([0, r])
      name = "random"
      x, y = (fl.RANDOM_SCALE * rng.standard_normal((n, r)) for n in np.shape(t["p"]))
    second.append(_row(bf.fit(t["p"], t["pi"], x, y, gtol=k.gtol, start=name,
                              max_iter=round(k.check_cap * cap)), t, tol))
  at = {s2["rank"]: s2 for s2 in second}
  st = ("off" if not second else "flips" if any(
      s2["converged"] and s2["ok"] != first[s2["rank"]]["ok"] for s2 in second)
        else "agrees" if all(s2["converged"] for s2 in second) else "unconverged")
  dec_ok = all(first[r]["converged"] for r in dec)
  return second, {
      "check_ranks": " ".join(str(s2["rank"]) for s2 in second),
      "check_starts": " ".join(s2["start"] for s2 in second),
      **{f"check_excess_at_{n}": at[r]["val_excess"] if r in at else float("nan")
         for n, r in (("r_star", s.r_star), ("lo", s.lo))},
      "start_check": st, "check_ok": int(dec_ok and st in ("agrees", "off")),
      "decisive_converged": int(dec_ok)}


def pair_diffs(res: bf.Fit, t: dict, val) -> np.ndarray:
  """log P_k(v|c) − log q_r(v|c) of each validation pair (c, v) whose context the target
  kept, in stream order: their mean is val(r) − val_full."""
  val, (c_n, v_n) = np.asarray(val, np.int64), np.shape(t["p"])
  row = np.full(v_n, -1)
  row[t["ctx"][:, 0]] = np.arange(c_n)
  c, y = row[val[:-1]], val[1:]
  c, y = c[c >= 0], y[c >= 0]
  z = res.X @ res.Y.T
  return np.log(t["p"][c, y]) - z[c, y] + logsumexp(z, axis=1)[c]


def bigram_n_v(train, val, vocab: int, cpt: float, k: BigramNKnobs, tol_char: float, cap: int,
               guess: int, block_tokens: int, log=lambda s: None) -> dict:
  """{"fits", "checks", "cells"} of one V over the fractions (ascending): each cell searched,
  then start-checked."""
  tol, out, prior = tol_char * cpt, {"fits": [], "checks": [], "cells": []}, None
  for f in sorted(k.fractions):
    streams = fraction_streams(train, f, k.period, k.block)
    head = {"V": int(vocab), "fraction": f, "train_tokens": int(sum(len(x) for x in streams))}
    t = targets_of(streams, val, vocab, k.add_k)
    rows, s, fits = _search(t, k, tol, guess, cap, prior)
    first = {r["rank"]: r for r in rows}
    checks, cols = _check(t, k, tol, cap, first, s)
    top = first[s.r_star if s.r_star is not None else max(first)]
    moved = [abs(x["val_excess"] - first[x["rank"]]["val_excess"]) for x in checks]
    cell = {**head, "chars_per_token": cpt, "tol_token": tol, "r_star": top["rank"],
            "lo": s.lo, "censored": int(s.censored),
            "decisive_converged": cols.pop("decisive_converged"),
            "all_converged": int(all(r["converged"] for r in rows)),
            "max_grad_norm": max(r["grad_norm"] for r in rows),
            "max_n_iter": max(r["n_iter"] for r in rows), "n_fits": len(rows),
            "evaluated": " ".join(map(str, s.evaluated)), "val_full": t["full"],
            "val_excess_at_r_star": top["val_excess"], "coverage": t["cov"],
            "n_contexts": len(t["ctx"]), "max_iter": cap, **cols,
            "margin_at_r_star": float("nan") if s.censored else tol - top["val_excess"],
            "margin_at_lo": first[s.lo]["val_excess"] - tol if s.lo in first else float("nan"),
            "start_moved": max(moved, default=float("nan")),
            **{f"se_at_{n}": block_se(pair_diffs(fits[r], t, val), 1, block_tokens)
               if r in fits else float("nan") for n, r in (("r_star", s.r_star), ("lo", s.lo))}}
    out["fits"] += [{**head, **r} for r in rows]
    out["checks"] += [{**head, **r} for r in checks]
    out["cells"].append(cell)
    log(f"V={vocab} f={f}: r*={cell['r_star']} (lo {s.lo}), fits {s.evaluated}, start check "
        f"{cell['start_check']}")
    guess, prior = cell["r_star"], (t["ctx"], fits)
  return out
