r"""The start check of the bigram r*(V, N) search (issue 33, item 3): is a cell's r* a property
of its target, or of the start its fits came from?

A cell's r* rests on its decisive fits: ok(r*) (the fit at r* is within tolerance) and not
ok(lo) (the failing grid rank below; for a censored cell, the grid's top). Fits of one rank
from different starts reach near-equal train floors that can differ on validation by more than
their train floors do (session 14: 0.002 nats at V = 2048, r = 32, ten times that cell's
margin). So per cell the decisive fits nearest the tolerance (``n`` of them: 1 = the nearest,
2 = both) are fitted again, to the same gtol, from a second start independent of the search's
chain of warm starts:

    second start = the svd start (``floor.svd_start``) when the search's fit did not start
                   from it, else a seeded random start N(0, RANDOM_SCALE²) (``floor``'s).

The cell's ``start_check`` is then

* ``flips``: some converged second fit lands on the other side of the tolerance (ok differs);
* ``unconverged``: no flip, but some second fit stopped at its cap (its side is not known);
* ``agrees``: every second fit converged on the same side; ``off``: no check was run.

A cell is ``reliable`` when its decisive fits converged and its check agrees (or is off); the
verdict (``bigram_n_report.v_status``) reads only reliable cells, so a verdict that depends on
a flipping cell says undecided.
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.studies import floor as fl

STATUSES = ("agrees", "flips", "unconverged", "off")


def decisive_ranks(r_star, lo: int) -> list:
  """The ranks that decide a cell's r*: r* (absent when censored) and lo (absent when 0)."""
  return [int(r) for r in (r_star, lo) if r is not None and int(r) > 0]


def pick(first: dict, r_star, lo: int, tol: float, n: int) -> list:
  """The ``n`` decisive ranks whose search fits (``first``: rank -> row with ``val_excess``)
  lie nearest the tolerance, nearest first."""
  if n < 0 or n > 2:
    raise ValueError(f"bigram-n start check: check={n} must be 0 (off), 1 (the decisive rank "
                     "nearest the tolerance) or 2 (both decisive ranks)")
  ranks = [r for r in decisive_ranks(r_star, lo) if r in first]
  ranks.sort(key=lambda r: (abs(float(first[r]["val_excess"]) - tol), r))
  return ranks[:n]


def second_start(p, pi, r: int, first_start: str, seed: int = 0) -> tuple:
  """(name, X, Y): the svd start, or a seeded random one when the search's fit began at svd."""
  if first_start != "svd":
    return "svd", *fl.svd_start(p, pi, r)
  rng = np.random.default_rng([seed, r])
  C, V = np.shape(p)
  return ("random", fl.RANDOM_SCALE * rng.standard_normal((C, r)),
          fl.RANDOM_SCALE * rng.standard_normal((V, r)))


def status(first: dict, second: list) -> str:
  """flips / unconverged / agrees / off for the second fits ``second`` (rows with rank, ok,
  converged) against the search's fits ``first`` (rank -> row)."""
  if not second:
    return "off"
  if any(int(s["converged"]) and int(s["ok"]) != int(first[int(s["rank"])]["ok"])
         for s in second):
    return "flips"
  return "agrees" if all(int(s["converged"]) for s in second) else "unconverged"


def columns(first: dict, second: list, r_star, lo: int, decisive_converged: bool) -> dict:
  """The cell's start-check columns: the ranks refitted, their second starts, the second
  start's val excess at r* and at lo (nan: not refitted), the status and ``reliable``."""
  at = {int(s["rank"]): s for s in second}

  def excess(r):
    return float(at[r]["val_excess"]) if r is not None and int(r) in at else math.nan

  st = status(first, second)
  return {"check_ranks": " ".join(str(int(s["rank"])) for s in second),
          "check_starts": " ".join(str(s["start"]) for s in second),
          "check_excess_at_r_star": excess(r_star), "check_excess_at_lo": excess(lo),
          "start_check": st, "reliable": int(bool(decisive_converged) and st in ("agrees", "off"))}
