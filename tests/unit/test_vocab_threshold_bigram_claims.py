"""The generated bigram r*(V, N) reading against its CSV rows, both ways (as
test_report_claims does): constructed cells where r* stays, where it moves with N, and where
an unconverged fit leaves it open, and where the start check (a decisive fit refitted from a
second start) flips or agrees; the paragraph must follow the numbers, not a fixed text."""

import numpy as np
import pytest

from experiments.vocab_threshold import bigram_n_check as ck
from experiments.vocab_threshold import bigram_n_report as rep
from sbjax.studies import floor as fl

KNOBS = {"fractions": [0.25, 0.5, 1.0], "grid": [16, 32, 64, 128], "max_iters": [100, 100],
         "add_k": 0.1, "gtol": 1e-5, "period": 4, "block": 2048}
SUMMARY = {"knobs": KNOBS, "tol_char": 0.005}
CHECKED = {"knobs": {**KNOBS, "check": 1, "check_cap": 2.0}, "tol_char": 0.005}


def cells_of(v, rstars, conv=(1, 1, 1), censored=(0, 0, 0)):
  grid = KNOBS["grid"]
  out = []
  for f, r, c, z in zip(KNOBS["fractions"], rstars, conv, censored):
    lo = grid[-1] if z else (grid[grid.index(r) - 1] if grid.index(r) else 0)
    out.append({"V": v, "fraction": f, "train_tokens": int(f * 400_000), "tol_token": 0.01,
                "r_star": r, "lo": lo, "censored": z, "decisive_converged": c,
                "val_excess_at_r_star": 0.004})
  return out


def fits_of(cells, grad=5e-6):
  """The fit at each cell's r* (excess 0.004) and at the failing rank below (0.02)."""
  return [{"V": c["V"], "fraction": c["fraction"], "rank": r, "val_excess": ex,
           "converged": c["decisive_converged"],
           "grad_norm": grad if c["decisive_converged"] else 3e-4,
           "n_iter": 700, "drift": 2e-4}
          for c in cells for r, ex in ((c["r_star"], 0.004), (c["lo"], 0.02)) if r]


def text(cells):
  return rep.paragraph(cells, fits_of(cells), SUMMARY)


def test_same_rstar_at_every_n_is_supported():
  cells = cells_of(256, [32, 32, 32]) + cells_of(1024, [64, 64, 64])
  v = rep.verdict(cells)
  assert v == {"overall": "supported", "per_v": {"256": "same", "1024": "same"}}
  t = text(cells)
  assert "**SUPPORTED" in t and "REFUTED" not in t and "NOT converged" not in t
  assert "N from 100,000 to 400,000 tokens" in t and "12 of 12 fits converged" in t
  assert "r* = 32 (in (16, 32]), excess +0.0040 vs tol 0.0100 (r = 16: excess +0.0200)" in t
  assert "slope 0.00" in t
  # the closest call: r* fits sit 0.006 from tol 0.01, the failing ones 0.01
  assert ("Closest call of the reliable cells: V = 256, f = 0.25, r = 32 is 0.0060 nats from "
          "the tolerance") in t
  assert "still fell by up to 2.0e-04 nats over their last 100 iterations" in t
  near = [dict(f, val_excess=0.0101) if (f["V"], f["fraction"], f["rank"]) == (1024, 1.0, 32)
          else f for f in fits_of(cells)]
  t = rep.paragraph(cells, near, SUMMARY)
  assert "Closest call of the reliable cells: V = 1024, f = 1, r = 32 is 0.0001 nats" in t


@pytest.mark.parametrize("rs, status", [([32, 64, 128], "grows"), ([128, 64, 64], "shrinks"),
                                        ([32, 64, 32], "mixed")])
def test_rstar_moving_with_n_is_refuted(rs, status):
  cells = cells_of(256, [32, 32, 32]) + cells_of(1024, rs)
  v = rep.verdict(cells)
  assert v["overall"] == "refuted" and v["per_v"] == {"256": "same", "1024": status}
  t = text(cells)
  assert "**REFUTED" in t and "SUPPORTED" not in t and f"V = 1,024 [{status}]" in t
  assert f"f = 0.25 (N = 100,000): r* = {rs[0]} (in (" in t


def test_an_unconverged_cell_leaves_it_undecided_and_is_named():
  cells = cells_of(256, [32, 32, 32], conv=(1, 0, 1))
  assert rep.verdict(cells) == {"overall": "undecided", "per_v": {"256": "undecided"}}
  t = text(cells)
  assert "**UNDECIDED" in t and "decisive fit unconverged" in t
  assert "NOT converged" in t and "r = 32: gradient 3.00e-04 after 700 iterations" in t
  assert "2 of 6 fits" not in t and "4 of 6 fits converged" in t
  # ...but converged cells that already differ decide it, whatever the unconverged one says
  cells = cells_of(256, [32, 64, 64], conv=(1, 0, 1))
  assert rep.verdict(cells)["overall"] == "refuted"


def test_censoring_is_an_interval_not_a_value():
  same_top = cells_of(256, [128, 128, 128], censored=(0, 1, 1))
  assert rep.verdict(same_top)["per_v"] == {"256": "grows"}  # (64, 128] then > 128
  all_cens = cells_of(256, [128, 128, 128], censored=(1, 1, 1))
  assert rep.verdict(all_cens)["overall"] == "undecided"
  assert "r* = > 128" in text(all_cens)


def checked(cells, second):
  """The cells with their start-check columns from ``bigram_n_check.columns``: ``second`` maps
  (V, fraction) to (rank, second start's excess, converged) of its refitted decisive fit."""
  out = []
  for c in cells:
    first = {int(f["rank"]): dict(f, ok=int(f["val_excess"] <= c["tol_token"]), start="prior")
             for f in fits_of([c]) if (f["V"], f["fraction"]) == (c["V"], c["fraction"])}
    r, ex, conv = second[(c["V"], c["fraction"])]
    rows = [{"rank": r, "start": "svd", "val_excess": ex, "converged": conv,
             "ok": int(ex <= c["tol_token"])}]
    out.append({**c, **ck.columns(first, rows, c["r_star"], c["lo"],
                                  bool(c["decisive_converged"]))})
  return out


def test_a_start_check_flip_leaves_the_verdict_undecided_and_agreement_keeps_it():
  cells = cells_of(256, [32, 32, 32]) + cells_of(1024, [32, 32, 64])
  agree = {(c["V"], c["fraction"]): (c["lo"], 0.015, 1) for c in cells}  # lo still fails
  v = rep.verdict(checked(cells, agree))
  assert v == {"overall": "refuted", "per_v": {"256": "same", "1024": "grows"}}
  t = rep.paragraph(checked(cells, agree), fits_of(cells), CHECKED)
  assert "**REFUTED" in t and "Start check: 6 of 6 cells agree; the second starts moved" in t
  assert "by up to 0.0050 nats (V = 256, f = 0.25, r = 16)" in t  # 0.015 against 0.02
  assert "decisive fit nearest the tolerance refitted to the same gtol, with 2x the search's" in t
  assert "No start check" in text(cells) and "; no start check." in text(cells)
  assert "start check agrees (r = 32 from svd +0.0150)" in t and "left out" not in t
  # the failing rank below the full-data r* = 64 passes from the second start: that cell's
  # r* is not a property of its target, and the "grows" rested on it
  flip = {**agree, (1024, 1.0): (32, 0.009, 1)}
  cs = checked(cells, flip)
  assert [c["start_check"] for c in cs][-1] == "flips" and cs[-1]["reliable"] == 0
  assert rep.verdict(cs) == {"overall": "undecided", "per_v": {"256": "same", "1024": "undecided"}}
  t = rep.paragraph(cs, fits_of(cells), CHECKED)
  assert "**UNDECIDED" in t and "REFUTED" not in t
  assert "start check FLIPS (r = 32 from svd +0.0090)" in t
  assert "5 of 6 cells agree; 1 flip (V = 1024, f = 1); such cells are left out" in t
  assert "up to 0.0110 nats (V = 1024, f = 1, r = 32)" in t  # 0.009 against 0.02
  assert "[undecided]: " in t and "(reliable, uncensored cells): slope 0.00." in t  # f = 1 out
  assert "(reliable, uncensored cells): slope 0.50." in rep.paragraph(
      checked(cells, agree), fits_of(cells), CHECKED)  # 32, 32, 64 over N = 1, 2, 4 (x 1e5)
  # the flipped cell is no longer the closest call: that is read among the reliable cells
  near = [dict(f, val_excess=0.0101) if (f["V"], f["fraction"], f["rank"]) == (1024, 1.0, 32)
          else f for f in fits_of(cells)]
  assert "Closest call of the reliable cells: V = 1024, f = 1" in rep.paragraph(
      checked(cells, agree), near, CHECKED)
  assert "Closest call of the reliable cells: V = 1024, f = 1" not in rep.paragraph(cs, near,
                                                                                    CHECKED)
  # a second fit stopped at its cap decides nothing either way
  capped = checked(cells, {**agree, (1024, 1.0): (32, 0.009, 0)})
  assert capped[-1]["start_check"] == "unconverged"
  assert rep.verdict(capped)["per_v"]["1024"] == "undecided"
  assert "second fit unconverged" in rep.paragraph(capped, fits_of(cells), CHECKED)


def test_a_flip_where_the_others_still_differ_keeps_the_refutation():
  cells = cells_of(1024, [32, 64, 64])
  second = {(c["V"], c["fraction"]): (c["lo"], 0.015, 1) for c in cells}
  second[(1024, 1.0)] = (32, 0.009, 1)  # the last cell flips; f = 1/4 and 1/2 still differ
  assert rep.verdict(checked(cells, second))["per_v"] == {"1024": "grows"}


def test_check_picks_the_decisive_fit_nearest_the_tolerance_and_an_independent_start():
  first = {32: {"val_excess": 0.0098, "start": "svd"}, 24: {"val_excess": 0.03, "start": "x"},
           48: {"val_excess": -0.02, "start": "pad32"}}
  assert ck.pick(first, 48, 32, 0.01, 1) == [32]  # 0.0002 from tol against 0.03
  assert ck.pick(first, 48, 32, 0.01, 2) == [32, 48]
  assert ck.pick(first, 32, 24, 0.01, 0) == []
  assert ck.pick(first, None, 48, 0.01, 2) == [48]  # censored: only the grid's top decides
  with pytest.raises(ValueError, match="check=3 must be 0"):
    ck.pick(first, 48, 32, 0.01, 3)
  rng = np.random.default_rng(0)
  p, pi = rng.dirichlet(np.ones(5), size=4), np.full(4, 0.25)
  name, x, y = ck.second_start(p, pi, 2, "pad1")
  sx, sy = fl.svd_start(p, pi, 2)
  assert name == "svd" and np.array_equal(x, sx) and np.array_equal(y, sy)
  name, x, y = ck.second_start(p, pi, 2, "svd")  # the search began at svd: a random start
  assert name == "random" and x.shape == (4, 2) and y.shape == (5, 2)
  assert 0 < np.abs(x).max() < 0.1 and not np.allclose(x, sx)
  assert ck.status({32: {"ok": 1}}, []) == "off"
