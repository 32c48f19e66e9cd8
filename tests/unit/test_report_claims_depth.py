"""The stabilisation reading of issue 33, item 6 (experiments/convergence/depth_reading.py) from
constructed stab_levels.csv rows (no training): each claim flips between supported, refuted
and undecided with its numbers, the printed numbers are the rows' medians, and the batch
agreement counts the layers whose step moves with the probe batch. Also the probe batches
(experiments/convergence/probes.py) on a real in-memory Dataset: disjoint, the first one the
fixed batch of every earlier run, fewer when the validation split is short."""

import numpy as np
import pytest

from experiments.convergence import depth_reading as dr
from experiments.convergence import probes
from experiments.convergence.report import gamma_regime
from sbjax.analysis import samples
from sbjax.data import Dataset

FINAL = 1000
LEVELS = (0.8, 0.9, 0.95)


def rows_of(models: dict, frac) -> list[dict]:
  """stab_levels.csv rows: ``models`` {name: width}, 4 layers, probes 0 and 1;
  ``frac(model, probe, kind, layer, level)`` is the stabilisation fraction."""
  out = []
  for m, w in models.items():
    for probe in (0, 1):
      for kind in ("mlp", "ov"):
        for layer in range(4):
          for level in LEVELS:
            f = frac(m, probe, kind, layer, level)
            out.append({"model": m, "width": w, "n_layers": 4, "probe": probe, "kind": kind,
                        "layer": layer, "level": level, "tokens": "last",
                        "estimator": "biased", "n_sequences": 128,
                        "stabilisation_step": round(f * FINAL), "final_step": FINAL,
                        "stabilisation_frac": round(f * FINAL) / FINAL})
  return out


def verdicts(text: str) -> dict:
  """{"Supported": ..., "Refuted": ..., "Undecided": ...} sections of the paragraph."""
  out, rest = {}, text
  for name in ("Supported", "Refuted", "Undecided"):
    rest = rest.split(f"{name}: ", 1)[1]
    out[name] = rest.split(". ", 1)[0] if name != "Undecided" else rest.split(". At ")[0]
  return out


TWO = {"d32": 32, "d128": 128}
SCOPE = gamma_regime([2.4])


def paper_like(m, probe, kind, layer, level):
  """d128 early and bottom-up; d32 later layers late (bottom-up too)."""
  if m == "d128":
    return 0.02 + 0.04 * layer
  return (0.04, 0.1, 0.5, 0.6)[layer]


def test_paper_like_rows_support_every_claim():
  rows = rows_of(TWO, paper_like)
  t = dr.depth_claims(rows, SCOPE)
  v = verdicts(t)
  assert "within ~20%" in v["Supported"] and "bottom-up" in v["Supported"]
  assert "later layers stabilise late" in v["Supported"]
  assert v["Refuted"] == "none" and v["Undecided"].startswith("none")
  # the printed numbers are the rows' medians: d128 0.02..0.14 -> 0.08; d32's top 0.55
  assert "0.8/batch 1 0.08" in t and "0.95/batch 2 0.55 (lower layers 0.07)" in t
  assert "same step for 8 of 8 layers" not in t and "same step for 16 of 16 layers" in t
  assert "lies within the 2.4–4.7" in t and "Contradicted" not in t
  assert "of 128 sequences, models d32, d128" in t and "not specific to the later" not in t


def test_reversed_rows_refute_every_claim():
  def top_down(m, probe, kind, layer, level):
    return 0.6 - 0.15 * layer if m == "d128" else (0.6, 0.5, 0.1, 0.05)[layer]
  v = verdicts(dr.depth_claims(rows_of(TWO, top_down), SCOPE))
  assert "within ~20%" in v["Refuted"] and "bottom-up" in v["Refuted"]
  assert "later layers stabilise late" in v["Refuted"]
  assert v["Supported"] == "none"


def test_batch_disagreement_leaves_a_claim_undecided_and_is_counted():
  def batch_dependent(m, probe, kind, layer, level):  # d128 top-down on batch 2 only
    return 0.14 - 0.04 * layer if m == "d128" and probe == 1 else paper_like(
        m, probe, kind, layer, level)
  rows = rows_of(TWO, batch_dependent)
  t = dr.depth_claims(rows, SCOPE)
  v = verdicts(t)
  # batch 2: d128 still early (median 0.08), but its two strata (rho -1) cancel d32's
  assert "within ~20%" in v["Supported"] and "later layers stabilise late" in v["Supported"]
  assert "bottom-up" in v["Undecided"] and "holds in 3 of 6 cells" in v["Undecided"]
  agree = dr.agreement(rows)
  assert [a["same"] for a in agree] == [8, 8, 8] and [a["n"] for a in agree] == [16] * 3
  assert np.allclose([a["max_diff"] for a in agree], 0.12)
  assert {a["where"] for a in agree} <= {"d128/mlp/0", "d128/mlp/3", "d128/ov/0", "d128/ov/3"}
  assert "same step for 8 of 16 layers (largest difference 0.12 of training" in t


def test_level_dependence_is_undecided_with_the_cell_count():
  def by_level(m, probe, kind, layer, level):  # early only at level 0.8
    return paper_like(m, probe, kind, layer, level) + (0.0 if level == 0.8 else 0.3)
  v = verdicts(dr.depth_claims(rows_of(TWO, by_level), SCOPE))
  assert "within ~20%" in v["Undecided"] and "holds in 2 of 6 cells" in v["Undecided"]


def test_late_lower_layers_are_named_beside_a_late_top():
  def all_late(m, probe, kind, layer, level):  # d32: every layer after 20%
    return paper_like(m, probe, kind, layer, level) + (0.3 if m == "d32" else 0.0)
  v = verdicts(dr.depth_claims(rows_of(TWO, all_late), SCOPE))
  assert "later layers stabilise late" in v["Supported"]
  assert "d32's lower layers also stabilise after 20% in every cell" in v["Supported"]


def test_no_order_is_undecided_and_one_width_is_named():
  rows = rows_of({"d32": 32}, lambda m, probe, kind, layer, level: 0.5)
  t = dr.depth_claims(rows, gamma_regime([7.9]))
  v = verdicts(t)
  assert "bottom-up" in v["Undecided"] and "T=– p=–" in v["Undecided"]
  assert "one width: it is both the largest and the smallest" in t
  assert "small Pythias' 7.9" in t


def test_levels_table_numbers():
  lines = dr.levels_lines(rows_of(TWO, paper_like))
  assert "| d128 | 0.9 | 2 | 0.08 (0.08, 0.08) | 0.12 | 100% |" in lines
  assert "| d32 | 0.8 | 1 | 0.30 (0.30, 0.30) | 0.55 | 50% |" in lines


def dataset(n_val_tokens: int) -> Dataset:
  rng = np.random.default_rng(0)
  return Dataset(rng.integers(0, 50, 4000), rng.integers(0, 50, n_val_tokens), seq_len=16,
                 global_batch_size=4, vocab_size=50)


def test_probe_batches_are_disjoint_and_the_first_is_the_fixed_batch():
  ds = dataset(2000)  # 124 windows
  got = probes.probe_batches(ds, 24, 2)
  assert len(got) == 2 and all(b.shape == (24, 17) for b in got)
  np.testing.assert_array_equal(got[0], samples.eval_sample(ds, 24))
  a, b = ({r.tobytes() for r in g} for g in got)
  assert not a & b
  for r in got[1]:  # each row of the second probe is a validation window
    hits = [s for s in range(0, len(ds.val_tokens) - 16, 16)
            if np.array_equal(ds.val_tokens[s:s + 17], r)]
    assert hits


def test_a_short_split_gives_fewer_probes_and_bad_counts_are_refused():
  ds = dataset(600)  # 37 windows: one probe of 24
  assert len(probes.probe_batches(ds, 24, 2)) == 1
  assert [b.shape[0] for b in probes.split_rows(np.zeros((50, 9)), 24, 3)] == [24, 24]
  with pytest.raises(ValueError, match="probe_batches=0: give an integer >= 1"):
    probes.probe_batches(ds, 24, 0)
