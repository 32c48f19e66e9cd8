"""The per-shape seed test of the collapse experiment (issue 33 item 4): several seed-only
groups, one per shape, each asked "is the correlation of each metric with the loss across
seeds different from 0?" by the 95% Fisher-z interval of r. The table is checked against
scipy on a synthetic collapse_models.csv, and the report's sentence against the CSV both
ways (a metric that follows the loss in one shape and not in the other, then swapped)."""

import numpy as np
import pytest
from scipy import stats as sps

from experiments import collapse
from experiments.collapse import findings as F
from experiments.collapse.measure import METRICS
from experiments.collapse.presets import seed_shapes
from experiments.collapse.run import result_knobs
from experiments.collapse.tables import seed_rows
from experiments.shared import write_rows

N = 16


def _models_csv(out, follows: dict):
  """Seed groups of N seeds each: in group g, nc4_agreement = loss (+ tiny noise) when
  follows[g], else independent noise; every other metric is noise."""
  rng = np.random.default_rng(0)
  rows = []
  for gi, (g, (n_layers, d, follows_loss)) in enumerate(follows.items()):
    loss = 3.6 + 0.01 * rng.normal(size=N)
    for s in range(N):
      row = {"kind": "seeds", "group": g, "run": f"{g}-s{s}", "model": f"{g}-s{s}-e3",
             "n_layers": n_layers, "d_model": d, "n_params": 1000 * (gi + 1), "seed": s,
             "min_count": 1, "last_snapshot": 1, "val_loss": loss[s]}
      row.update({k: rng.normal() for k in METRICS})
      if follows_loss:
        row["nc4_agreement"] = loss[s] + 1e-4 * rng.normal()
      rows.append(row)
  out.mkdir(parents=True, exist_ok=True)
  write_rows(out / "collapse_models.csv", rows)
  return rows


def test_seed_table_per_shape_against_scipy(tmp_path):
  rows = _models_csv(tmp_path, {"seeds-L1-d32": (1, 32, True), "seeds-L2-d64": (2, 64, False)})
  table = seed_rows(tmp_path, n_perm=500)
  assert {r["group"] for r in table} == {"seeds-L1-d32", "seeds-L2-d64"}
  assert len(table) == 2 * len(METRICS)
  for t in table:
    sel = [r for r in rows if r["group"] == t["group"]]
    x = np.array([r[t["metric"]] for r in sel])
    y = np.array([r["val_loss"] for r in sel])
    ref = sps.pearsonr(x, y)
    lo, hi = ref.confidence_interval(0.95)
    assert t["n"] == N and t["pearson_r"] == pytest.approx(ref.statistic, abs=1e-12)
    assert (t["ci_lo"], t["ci_hi"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    assert t["val_loss_mean"] == pytest.approx(y.mean()) and t["val_loss_sd"] == pytest.approx(
        y.std(ddof=1))
    want = "r > 0" if lo > 0 else ("r < 0" if hi < 0 else "not distinguishable from 0")
    assert t["ci_verdict"] == want
    assert (t["n_layers"], t["d_model"]) == ((1, 32) if t["group"] == "seeds-L1-d32" else (2, 64))
  nc4 = {t["group"]: t for t in table if t["metric"] == "nc4_agreement"}
  assert nc4["seeds-L1-d32"]["ci_verdict"] == "r > 0"
  assert nc4["seeds-L2-d64"]["ci_verdict"] == "not distinguishable from 0"


def _clause(sentence: str, group: str) -> str:
  """The part of the sentence about one seed group."""
  start = sentence.index(group)
  nxt = [sentence.index(g, start + 1) for g in ("seeds-L1-d32", "seeds-L2-d64")
         if g != group and g in sentence[start + 1:]]
  return sentence[start:min(nxt) if nxt else len(sentence)]


@pytest.mark.parametrize("first_follows", [True, False])
def test_seed_sentence_follows_the_csv_both_ways(tmp_path, first_follows):
  _models_csv(tmp_path, {"seeds-L1-d32": (1, 32, first_follows),
                         "seeds-L2-d64": (2, 64, not first_follows)})
  table = seed_rows(tmp_path, n_perm=200)
  s = F.seed_sentence(table, ("nc4_agreement", "nc2_norm_cov"))
  assert s.startswith(f"Among {N} data-order seeds of each of 2 shape(s)")
  yes, no = (("seeds-L1-d32", "seeds-L2-d64") if first_follows
             else ("seeds-L2-d64", "seeds-L1-d32"))
  nc4 = {t["group"]: t for t in table if t["metric"] == "nc4_agreement"}
  ci = F.ci_text(nc4[yes]["pearson_r"], nc4[yes]["ci_lo"], nc4[yes]["ci_hi"])
  assert f"r ≠ 0 for nc4_agreement ({ci}, p " in _clause(s, yes)
  assert "r ≠ 0 for nc4_agreement" not in _clause(s, no)
  assert "not distinguishable from 0: " in _clause(s, no)
  assert "nc4_agreement (r " in _clause(s, no).split("not distinguishable from 0: ")[1]
  hits = sum(t["ci_verdict"] in ("r > 0", "r < 0") for t in table
             if t["metric"] in ("nc4_agreement", "nc2_norm_cov"))
  assert f"{hits} of 4 intervals exclude 0, against about 0.2 expected" in s


def test_presets_have_two_seed_shapes_and_old_outputs_keep_their_key():
  for name, shapes in (("test", ((1, 8), (1, 16))), ("cpu", ((1, 32), (2, 64)))):
    p = collapse.PRESETS[name]
    assert seed_shapes(p.knobs) == shapes
    sg = [g for g in collapse.groups(p) if g[1] == "seeds"]
    assert [(g[2], g[3]) for g in sg] == list(shapes)
    assert all(len(g[4]) == p.knobs.seeds for g in sg) and len({g[0] for g in sg}) == 2
    assert {m.data_seed for m in sg[1][4]} == set(range(p.knobs.seeds))
  assert collapse.PRESETS["cpu"].knobs.seeds == 16
  # a preset without a second shape keeps the same-experiment key it had before the knob
  assert "extra_seed_archs" not in result_knobs(collapse.PRESETS["quick"])
  assert "extra_seed_archs" in result_knobs(collapse.PRESETS["cpu"])
