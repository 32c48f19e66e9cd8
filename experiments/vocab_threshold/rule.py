r"""The pre-registered rule (``Rule``, its words ``Rule.text``): when an r* is reliable, and
what the reliable cells say about "r* moves" (with V for the trained r*, with the data size N
for the exact bigram r*).

A cell (one V and trunk seed; one V and data fraction for the bigram) reads r* on a rank grid
as the interval (r_below, r*], decided by two margins, margin_at_r_star = tol − excess(r*) and
margin_below = excess(r_below) − tol (excess(r) = loss(r) − the reference's loss). A margin is
clear when margin > n_se · se and margin > moved (se: its validation standard error,
``block_se``; moved: the start movement, the largest change of a deciding excess between two
starts); NaN is not clear. A cell is reliable when every margin it has is clear and, for the
bigram, its start check agreed (``check_ok``). ``decide``: supports when two reliable cells at
different V (N) have disjoint intervals, refutes when every cell is reliable and uncensored
with one r*, else undecided.

``block_se``: the per-unit paired differences (in stream order) cut into consecutive blocks of
about ``block_tokens`` tokens (the remainder dropped); the block bootstrap's standard error of
their mean in its limit of infinitely many resamples, sd(block means; ddof 0) / sqrt(nb).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Rule:
  n_se: float = 2.0  # a margin must exceed this many validation standard errors
  block_tokens: int = 1024  # the bootstrap's block length in validation tokens
  claim: str = "the trained r* moves with V"
  over: str = "V"  # the cells' column the claim is about ("fraction": the bigram's N)

  def text(self) -> str:
    return (f"Rule (pre-registered): a cell's r* is reliable only when each margin deciding it "
            f"(tol − excess at r*, excess at the rank below − tol) exceeds {self.n_se:g} "
            f"validation standard errors (block bootstrap, blocks of {self.block_tokens} "
            "tokens) and the start movement; the verdict on "
            f"\"{self.claim}\" uses the reliable cells only: supports when two cells that "
            f"differ in {self.over} have disjoint r* intervals, refutes when every cell is "
            "reliable and uncensored at one r*, else undecided.")


def block_se(diffs, unit_tokens: int, block_tokens: int) -> float:
  """The block bootstrap's standard error of mean(diffs) (module doc); NaN below 2 blocks."""
  x = np.asarray(diffs, np.float64)
  per = max(1, round(block_tokens / unit_tokens))
  nb = len(x) // per
  if nb < 2:
    return math.nan
  means = x[:nb * per].reshape(nb, per).mean(1)
  return float(means.std() / math.sqrt(nb))


def _clear(margin, se, moved, rule: Rule) -> bool:
  m, s, mv = (float("nan") if v in (None, "") else float(v) for v in (margin, se, moved))
  return bool(m > rule.n_se * s and m > mv)  # False when any is NaN


def _margins(c: dict) -> list[tuple]:
  """(name, margin, se) of the margins that decide cell ``c``."""
  out = []
  if not int(c["censored"]):
    out.append(("at r*", c["margin_at_r_star"], c["se_at_r_star"]))
  if c.get("r_below") not in (None, "") and int(float(c["r_below"])) > 0:
    out.append((f"below (r = {int(float(c['r_below']))})", c["margin_below"], c["se_below"]))
  return out


def mark(c: dict, rule: Rule) -> dict:
  """``c`` with ``reliable`` (0/1) and ``why``: the margins that are not clear, or ''."""
  bad = [f"margin {n} {_f(m)} not above max({rule.n_se:g} se = {_f(rule.n_se * float(s))}, moved = "
         f"{_f(c['moved'])})" for n, m, s in _margins(c)
         if not _clear(m, s, c["moved"], rule)]
  if not int(c.get("check_ok", 1)):
    bad.append("start check or convergence failed")
  return {**c, "reliable": int(not bad), "why": "; ".join(bad)}


def _f(v) -> str:
  v = float("nan") if v in (None, "") else float(v)
  return f"{v:.4f}" if math.isfinite(v) else "NaN"


def name(c: dict) -> str:
  seed = f", seed {int(c['seed'])}" if "seed" in c else ""
  frac = f", f = {float(c['fraction']):g}" if "fraction" in c else ""
  return f"V = {int(c['V'])}{frac}{seed}"


def _interval(c: dict) -> tuple:
  lo = int(float(c["r_below"])) if c.get("r_below") not in (None, "") else 0
  return lo, math.inf if int(c["censored"]) else int(c["r_star"])


def _slack(c: dict, rule: Rule) -> float:
  """The smallest margin over its threshold max(n_se · se, moved) among the cell's margins."""
  return min((float(m) - max(rule.n_se * float(s), float(c["moved"]))
              for _, m, s in _margins(c)), default=math.inf)


def decide(cells: list[dict], rule: Rule) -> dict:
  """The verdict on ``rule.claim`` from the cells (module doc); each cell needs V (or the
  ``rule.over`` column), r_star, r_below, censored, margin_at_r_star, se_at_r_star,
  margin_below, se_below and moved."""
  marked = [mark(c, rule) for c in cells]
  rel = sorted((c for c in marked if c["reliable"]), key=lambda c: float(c[rule.over]))
  pairs = [(a, b) for a, b in itertools.combinations(rel, 2)
           if float(a[rule.over]) != float(b[rule.over])
           and (_interval(a)[1] <= _interval(b)[0] or _interval(b)[1] <= _interval(a)[0])]
  if pairs:
    steps = {1 if _interval(a)[1] <= _interval(b)[0] else -1 for a, b in pairs}
    a, b = max(pairs, key=lambda p: min(_slack(p[0], rule), _slack(p[1], rule)))
    return {"verdict": "supports", "direction": {1: "grows", -1: "shrinks"}.get(
        sum(steps), "mixed"), "rests_on": f"{name(a)} (r* {_interval(a)}) and {name(b)} "
            f"(r* {_interval(b)}), both reliable", "cells": marked, "claim": rule.claim}
  if marked and len(rel) == len(marked) and not any(int(c["censored"]) for c in marked) \
      and len({int(c["r_star"]) for c in marked}) == 1:
    c = min(marked, key=lambda c: _slack(c, rule))
    return {"verdict": "refutes", "direction": "same", "rests_on": f"{name(c)}: the tightest "
            f"margin, {_f(_slack(c, rule))} above its threshold", "cells": marked,
            "claim": rule.claim}
  bad = [c for c in marked if not c["reliable"]]
  why = "; ".join(f"{name(c)}: {c['why']}" for c in bad) or "no two reliable cells differ"
  return {"verdict": "undecided", "direction": "", "rests_on": why, "cells": marked,
          "claim": rule.claim}
