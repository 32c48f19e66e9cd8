"""The planted experiment's test-mos-seeds preset (issue 33 item 5 at test size): part 2 alone,
in (language, objective) cells, each arm one population of lrs x seeds, measured on the
validation stream and on an independent selection stream; the report's lr choice and verdicts
recomputed from the CSV."""

import json

import numpy as np
import pytest
from scipy import stats

from experiments import planted as exp
from experiments.planted import mos_cells
from experiments.planted.measure import selection_batches
from experiments.shared import read_rows
from sbjax.studies.head_flops import head_flops

P = "test-mos-seeds"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  d = tmp_path_factory.mktemp("mos_seeds")
  exp.run(d, P, verbose=False)  # the preset's parts: part 2 alone
  return d


def test_rows_cells_and_selection_columns(out):
  rows = read_rows(out / exp.report.CSV_MIX)
  p = exp.get_preset(P)
  assert not (out / exp.report.CSV_KNEE).exists()  # part 1 did not run
  assert [r["label"] for r in rows] == [label for label, _ in exp.mix_configs(p)]
  assert {(r["lang"], r["objective"]) for r in rows} == {("knee", "sampled"), ("mos", "expected")}
  n = len(p.knobs.mix_lrs) * len(p.knobs.mix_seeds)
  assert len(rows) == 2 * len(p.knobs.mix_runs) * n
  cfg = dict(exp.mix_configs(p))
  for r in rows:
    assert r["head_flops"] == head_flops(cfg[r["label"]].model)
    assert np.isfinite(r["sel_gap"])
    assert r["sel_gap"] == pytest.approx(r["sel_expected_loss"] - r["H"])
    assert r["sel_expected_loss"] != r["expected_loss"]  # another stream
  low = next(r for r in rows if r["run"] == "lowrank")
  flops = next(r for r in rows if r["run"] == "mos-flops")
  assert flops["head_flops"] <= low["head_flops"]


def test_selection_stream_is_independent():
  lang = exp.run.__globals__["_dataset"](exp.mix_configs(exp.get_preset(P))[0][1]).planted
  a = selection_batches(lang, 2, 4, 8, 0)
  assert [b.shape for b in a] == [(4, 9)] * 2
  assert all(np.array_equal(x, y) for x, y in zip(a, selection_batches(lang, 2, 4, 8, 0)))
  val = lang.sample([0, 2], (8, 9))  # the validation stream's key gives other sequences
  assert not np.array_equal(np.concatenate(a), val)


def test_report_recomputed_from_csv(out):
  rows = read_rows(out / exp.report.CSV_MIX)
  meta = json.loads((out / exp.report.META).read_text())
  text = exp.report_section(out, ".")
  summary = exp.summarize(out)
  assert set(meta["languages"]) == {"knee", "mos"} and meta["mixture"]["kind"] == "planted_mos"
  for (lang, obj), rs in mos_cells.cells(rows):
    gaps = {}
    for run in ("mos", "lowrank", "mos-flops"):
      sel = [r for r in rs if r["run"] == run]
      by_lr = {lr: np.mean([r["sel_gap"] for r in sel if r["lr"] == lr])
               for lr in {r["lr"] for r in sel}}
      best = min(by_lr, key=by_lr.get)  # chosen on the selection stream
      gaps[run] = [r["gap"] for r in sel if r["lr"] == best]
    for key, run in (("params", "mos"), ("flops", "mos-flops")):
      t = stats.ttest_ind(gaps["lowrank"], gaps[run], equal_var=False)
      lo, hi = t.confidence_interval(0.95)
      want = "supported" if lo > 0 else "refuted" if hi < 0 else "undecided"
      assert summary["mix"][f"{lang}/{obj}"][key] == want
      assert f"[{lo:.4f}, {hi:.4f}]" in text
  assert "Selection history" in text and "k = 8" in text and "Scope and choices" in text
  assert (out / exp.report.FIG_MIX).exists()
