"""The bigram r*(V, N) reading (issue 33, item 3), from ``bigram_n_cells.csv`` and
``bigram_n_fits.csv`` only: the verdict, the generated paragraph and the figure.

Claim tested: "r*(V) is a property of the language, not of the data size": at fixed V, r* is
the same at every data fraction. Per V, only "reliable" cells count: their decisive fits (the
fit at r* and the one at the failing grid rank below it) converged to gtol, and the start check
(``bigram_n_check``: the decisive fit nearest the tolerance refitted from a second start) put
it on the same side of the tolerance (cells of a run without the check: convergence alone).
Each r* is known to lie in (lo, r*] (censored: above the grid's top). Per V:

* ``grows`` / ``shrinks`` / ``mixed``: two reliable cells' intervals are disjoint, r* rising,
  falling or both with N;
* ``same``: every cell reliable, uncensored and at one grid rank;
* ``undecided``: otherwise (reliable cells agree but some cell is unconverged, censored or
  flips under the start check).

Overall: **refuted** (r* depends on N) if some V is grows/shrinks/mixed, **supported** if every
V is ``same``, else **undecided**. The scope is this corpus, these V, N from the smallest to the
largest fraction, and the grid's resolution.
"""

from __future__ import annotations

import json
import math
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from sbjax.studies.floor import RANDOM_SCALE  # noqa: E402
from ..shared import read_rows, finish_figure, upath  # noqa: E402
from .measure import loglog_fit  # noqa: E402

FITS_CSV = "bigram_n_fits.csv"
CHECKS_CSV = "bigram_n_checks.csv"
CELLS_CSV = "bigram_n_cells.csv"
SUMMARY = "bigram_n.json"
FIGURE = "fig_bigram_n.png"


def _interval(c: dict) -> tuple[float, float]:
  return (float(c["lo"]), math.inf) if int(c["censored"]) else (float(c["lo"]), float(c["r_star"]))


def reliable(c: dict) -> bool:
  """The cell's ``reliable`` column; a run without the start check: its decisive fits
  converged."""
  r = c.get("reliable")
  return bool(int(c["decisive_converged"] if r is None or r == "" else r))


def v_status(cells: list) -> str:
  """grows / shrinks / mixed / same / undecided for the cells of one V (module docstring)."""
  cs = sorted(cells, key=lambda c: float(c["fraction"]))
  rel = [c for c in cs if reliable(c)]
  ivs = [_interval(c) for c in rel]
  steps = []
  for (alo, ahi), (blo, bhi) in zip(ivs, ivs[1:]):
    steps.append(1 if ahi <= blo else -1 if bhi <= alo else 0)
  if any(steps):
    return "grows" if min(steps) >= 0 else "shrinks" if max(steps) <= 0 else "mixed"
  if len(rel) == len(cs) and not any(int(c["censored"]) for c in cs):
    if len({int(c["r_star"]) for c in cs}) == 1:
      return "same"
  return "undecided"


def verdict(cells: list) -> dict:
  """{"overall": supported / refuted / undecided, "per_v": {V: status}}."""
  vs = sorted({int(c["V"]) for c in cells})
  per_v = {v: v_status([c for c in cells if int(c["V"]) == v]) for v in vs}
  if any(s in ("grows", "shrinks", "mixed") for s in per_v.values()):
    overall = "refuted"
  elif per_v and all(s == "same" for s in per_v.values()):
    overall = "supported"
  else:
    overall = "undecided"
  return {"overall": overall, "per_v": {str(v): s for v, s in per_v.items()}}


def _excess_at(fits: list, c: dict, rank: int) -> str:
  """", r = <rank> fails by <excess>" from the fit rows (empty when that rank was not fitted)."""
  at = [f for f in fits if int(f["V"]) == int(c["V"]) and float(f["fraction"]) ==
        float(c["fraction"]) and int(f["rank"]) == rank]
  return f" (r = {rank}: excess {float(at[0]['val_excess']):+.4f})" if at else ""


def _v_sentence(cells: list, status: str, fits: list) -> str:
  cs = sorted(cells, key=lambda c: float(c["fraction"]))
  parts = []
  for c in cs:
    lo, rs = int(c["lo"]), int(c["r_star"])
    r = f"> {lo}" if int(c["censored"]) else f"{rs} (in ({lo}, {rs}])"
    flag = ("" if int(c["decisive_converged"]) else ", decisive fit unconverged") + _check_part(c)
    parts.append(f"f = {float(c['fraction']):g} (N = {int(c['train_tokens']):,}): r* = {r}, "
                 f"excess {float(c['val_excess_at_r_star']):+.4f} vs tol "
                 f"{float(c['tol_token']):.4f}{_excess_at(fits, c, lo)}{flag}")
  ok = [c for c in cs if not int(c["censored"]) and reliable(c)]
  slope = loglog_fit([int(c["train_tokens"]) for c in ok], [int(c["r_star"]) for c in ok])
  sl = (f"; log r* on log N (reliable, uncensored cells): slope {slope['beta']:.2f}"
        if slope["n"] >= 2 and math.isfinite(slope["beta"]) else "")
  return f"V = {int(cs[0]['V']):,} [{status}]: " + "; ".join(parts) + sl + "."


def _convergence_sentence(fits: list, gtol: float) -> str:
  bad = [f for f in fits if not int(f["converged"])]
  head = (f"{len(fits) - len(bad)} of {len(fits)} fits converged to gtol {gtol:g} "
          f"(largest gradient norm {max(float(f['grad_norm']) for f in fits):.2e}).")
  if not bad:
    return head
  cells = "; ".join(f"V = {int(f['V'])}, f = {float(f['fraction']):g}, r = {int(f['rank'])}: "
                    f"gradient {float(f['grad_norm']):.2e} after {int(f['n_iter'])} iterations"
                    f", F still fell {float(f['drift']):.1e} over its last 100"
                    for f in bad)
  return head + f" NOT converged (upper bounds on the floor): {cells}."


def _margin_sentence(cells: list, fits: list) -> str:
  """The closest call: of the reliable cells (those the verdict reads), the decisive fit (at r*
  or the failing rank below) whose val excess is nearest the tolerance, beside how much
  converged fits still fell per 100 iterations."""
  dec = []
  for c in filter(reliable, cells):
    for f in fits:
      if (int(f["V"]), float(f["fraction"])) == (int(c["V"]), float(c["fraction"])) and int(
          f["rank"]) in (int(c["r_star"]), int(c["lo"])):
        dec.append((abs(float(f["val_excess"]) - float(c["tol_token"])), f, c))
  if not dec:
    return ""
  m, f, c = min(dec, key=lambda x: x[0])
  drifts = [float(x["drift"]) for x in fits if int(x["converged"])
            and math.isfinite(float(x["drift"]))]
  tail = (f"; converged fits still fell by up to {max(drifts):.1e} nats over their last 100 "
          "iterations, and fits of one rank from other starts can differ on validation by more "
          "than their train floors do, so a decision this close can move with the start or a "
          "tighter gtol" if drifts else "")
  return (f" Closest call of the reliable cells: V = {int(c['V'])}, f = {float(c['fraction']):g}, r = {int(f['rank'])}"
          f" is {m:.4f} nats from the tolerance (excess {float(f['val_excess']):+.4f} vs "
          f"{float(c['tol_token']):.4f}){tail}.")


def _check_part(c: dict) -> str:
  """", start check <status>: r = 32 from svd +0.0116" for one cell (empty: no check)."""
  st = c.get("start_check")
  if not isinstance(st, str) or st == "off":
    return ""
  parts = []
  for r, name in zip(str(c["check_ranks"]).split(), str(c["check_starts"]).split()):
    r = int(float(r))
    ex = c["check_excess_at_r_star"] if r == int(c["r_star"]) and not int(c["censored"]) \
        else c["check_excess_at_lo"]
    parts.append(f"r = {r} from {name} {float(ex):+.4f}")
  word = {"flips": "FLIPS", "unconverged": "second fit unconverged"}.get(st, st)
  return f", start check {word} ({', '.join(parts)})"


def _moved(c: dict, fits: list) -> list:
  """(|second − first val excess|, rank) of each refitted decisive fit of cell ``c``."""
  out = []
  for r in str(c["check_ranks"]).split():
    r = int(float(r))
    first = [f for f in fits if (int(f["V"]), float(f["fraction"]), int(f["rank"])) ==
             (int(c["V"]), float(c["fraction"]), r)]
    ex = c["check_excess_at_r_star"] if r == int(c["r_star"]) and not int(c["censored"]) \
        else c["check_excess_at_lo"]
    if first:
      out.append((abs(float(ex) - float(first[0]["val_excess"])), r))
  return out


def _check_sentence(cells: list, fits: list) -> str:
  """How many cells the start check ran on, which flipped or did not converge, and how far
  the second starts moved the val excess."""
  ran = [c for c in cells if isinstance(c.get("start_check"), str) and c["start_check"] != "off"]
  if not ran:
    return " No start check was run (each r* rests on one chain of starts)."
  out = f" Start check: {sum(c['start_check'] == 'agrees' for c in ran)} of {len(ran)} cells agree"
  bad = [c for c in ran if c["start_check"] != "agrees"]
  for st, word in (("flips", "flip"), ("unconverged", "have an unconverged second fit")):
    mine = [c for c in bad if c["start_check"] == st]
    if mine:
      out += (f"; {len(mine)} {word} (" + "; ".join(
          f"V = {int(c['V'])}, f = {float(c['fraction']):g}" for c in mine) + ")")
  out += "; such cells are left out of the verdict" if bad else ""
  moved = [(d, r, c) for c in ran for d, r in _moved(c, fits)]
  if moved:
    d, r, c = max(moved, key=lambda x: x[0])
    out += (f"; the second starts moved the val excess by up to {d:.4f} nats (V = {int(c['V'])}"
            f", f = {float(c['fraction']):g}, r = {r})")
  return out + "."


def _check_choice(k: dict) -> str:
  n = k.get("check", 0)
  if not n:
    return "no start check"
  which = "the decisive fit nearest the tolerance" if n == 1 else "both decisive fits"
  return (f"start check: per cell {which} refitted to the same gtol, with {k.get('check_cap', 1):g}x "
          "the search's iteration cap, from the svd start "
          f"(a seeded random start N(0, {RANDOM_SCALE:g}²) where the search's fit began at svd); a cell whose "
          "side of the tolerance flips, or whose second fit stops at its cap, is unreliable")


WORDS = {"supported": "SUPPORTED: r* does not move with N at any V",
         "refuted": "REFUTED: at fixed V the bigram's r* moves with the data size",
         "undecided": "UNDECIDED: the reliable cells do not separate r* at different N, but "
                      "some cell is unconverged, censored or flips under the start check"}


def paragraph(cells: list, fits: list, summary: dict) -> str:
  """The generated reading: verdict, scope, per-V numbers, convergence, every choice."""
  k, v = summary["knobs"], verdict(cells)
  vs = sorted({int(c["V"]) for c in cells})
  n_lo = min(int(c["train_tokens"]) for c in cells)
  n_hi = max(int(c["train_tokens"]) for c in cells)
  per_v = " ".join(_v_sentence([c for c in cells if int(c["V"]) == x], v["per_v"][str(x)],
                               fits) for x in vs)
  return (
      "**Exact bigram r\\*(V, N)** (no training; is r\\*(V) a property of the language or of "
      f"the data size?). Claim tested: at fixed V, r\\* does not depend on the number N of "
      f"training tokens. **{WORDS[v['overall']]}** — scope: this corpus, V ∈ "
      f"{{{', '.join(map(str, vs))}}}, N from {n_lo:,} to {n_hi:,} tokens (fractions "
      f"{', '.join(f'{f:g}' for f in k['fractions'])}), r\\* on the grid "
      f"{{{', '.join(map(str, k['grid']))}}}. {per_v} "
      + _convergence_sentence(fits, k["gtol"]) + _check_sentence(cells, fits) +
      _margin_sentence(cells, fits) +
      f" Choices: add-k {k['add_k']:g} smoothing of the train counts; val(r) and val_full "
      "scored on the whole validation stream's counts (only contexts seen in that fraction); "
      f"tolerance {summary['tol_char']} nats per character × characters per token (the "
      "trained r\\*'s rule); fractions = nested blocks of "
      f"{k['block']} tokens (index mod {k['period']}); r\\* by a galloping search on the grid "
      "from the previous fraction's r\\* (assumes val(r) falls with r), each fit an L-BFGS run to "
      f"tangent gradient ≤ {k['gtol']:g} or its cap ({', '.join(map(str, k['max_iters']))} "
      "iterations at the V above), warm-started from the previous fraction's fit at that rank "
      "or the nearest fitted rank; " + _check_choice(k) + ".")


def section(out, rel: str) -> str:
  """The markdown section of the bigram-n study (empty when it has not run in ``out``)."""
  out = upath(out)
  if not (out / CELLS_CSV).exists():
    return ""
  cells, fits = read_rows(out / CELLS_CSV), read_rows(out / FITS_CSV)
  summary = json.loads((out / SUMMARY).read_text())
  fig = f"![bigram r* vs N]({rel}/{FIGURE})\n\n" if (out / FIGURE).exists() else ""
  return "### bigram r*(V, N)\n\n" + fig + paragraph(cells, fits, summary) + "\n"


def draw(out):
  out = upath(out)
  cells, fits = read_rows(out / CELLS_CSV), read_rows(out / FITS_CSV)
  checks = read_rows(out / CHECKS_CSV) if (out / CHECKS_CSV).exists() else []
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for i, v in enumerate(sorted({int(c["V"]) for c in cells})):
    for j, f in enumerate(sorted({float(c["fraction"]) for c in cells})):
      pts = sorted((int(r["rank"]), float(r["val_excess"])) for r in fits
                   if int(r["V"]) == v and float(r["fraction"]) == f)
      if pts:
        axes[0].plot(*zip(*pts), "os^"[j % 3] + "-", color=f"C{i}", alpha=0.4 + 0.3 * j,
                     label=f"V={v}, f={f:g}")
    second = [(int(r["rank"]), float(r["val_excess"])) for r in checks if int(r["V"]) == v]
    if second:  # the start check's second fits
      axes[0].plot(*zip(*second), "x", color=f"C{i}", ms=8, label=f"V={v}, second start")
    cs = sorted((c for c in cells if int(c["V"]) == v), key=lambda c: int(c["train_tokens"]))
    tol = float(cs[0]["tol_token"])
    axes[0].axhline(tol, color=f"C{i}", ls=":", lw=0.8)
    axes[1].errorbar([int(c["train_tokens"]) for c in cs], [int(c["r_star"]) for c in cs],
                     yerr=[[int(c["r_star"]) - max(int(c["lo"]), 1) for c in cs],
                           [0] * len(cs)], fmt="o-", color=f"C{i}", label=f"V={v}")
  axes[0].set_xscale("log", base=2)
  axes[0].set(xlabel="rank r", ylabel="val(r) − val_full (nats/token; dotted: tol)")
  axes[0].legend(fontsize=6)
  axes[1].set_xscale("log")
  axes[1].set_yscale("log", base=2)
  axes[1].set(xlabel="training tokens N", ylabel="r* (bar: down to the failing rank)")
  axes[0].set_xticks(sorted({int(r["rank"]) for r in fits}))
  axes[1].set_yticks(sorted({int(c["r_star"]) for c in cells}
                            | {int(c["lo"]) for c in cells if int(c["lo"]) > 0}))
  for ax in axes:
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
  axes[0].xaxis.set_major_formatter(ScalarFormatter())
  axes[0].xaxis.set_minor_formatter(NullFormatter())
  axes[1].legend(fontsize=7)
  return finish_figure(fig, out / FIGURE, "Exact bigram r*(V, N)", dpi=110)
