"""The generated bigram r*(V, N) reading against its CSV rows, both ways (as
test_report_claims does): constructed cells where r* stays, where it moves with N, and where
an unconverged fit leaves it open; the paragraph must follow the numbers, not a fixed text."""

import pytest

from experiments.vocab_threshold import bigram_n_report as rep

KNOBS = {"fractions": [0.25, 0.5, 1.0], "grid": [16, 32, 64, 128], "max_iters": [100, 100],
         "add_k": 0.1, "gtol": 1e-5, "period": 4, "block": 2048}
SUMMARY = {"knobs": KNOBS, "tol_char": 0.005}


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
  assert "Closest call: V = 256, f = 0.25, r = 32 is 0.0060 nats from the tolerance" in t
  assert "still fell by up to 2.0e-04 nats over their last 100 iterations" in t
  near = [dict(f, val_excess=0.0101) if (f["V"], f["fraction"], f["rank"]) == (1024, 1.0, 32)
          else f for f in fits_of(cells)]
  t = rep.paragraph(cells, near, SUMMARY)
  assert "Closest call: V = 1024, f = 1, r = 32 is 0.0001 nats" in t


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
