"""experiments.mos_text at its test preset on a generated corpus: one population per head (the
seeds as members), the lowrank arm matched to the MoS head's parameters, and the report's
verdicts recomputed from the CSV with scipy's Welch test."""

import json

import numpy as np
import pytest
from scipy import stats

from experiments import mos_text
from experiments.shared import read_rows
from sbjax.heads import head_param_count
from tests._corpus import generated_docs, write_corpus


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  root = tmp_path_factory.mktemp("mos_text")
  corpus = write_corpus(root / "corpus", generated_docs(3, 6))
  mos_text.run(root / "out", "test", data=str(corpus), verbose=False)
  return root / "out"


def test_rows_arms_and_matching(out):
  rows = read_rows(out / mos_text.CSV)
  p = mos_text.get_preset("test")
  assert [r["arm"] for r in rows] == [a for a, _ in p.knobs.arms for _ in p.knobs.seeds]
  assert [int(r["seed"]) for r in rows] == list(p.knobs.seeds) * len(p.knobs.arms)
  by = {r["arm"]: r for r in rows}
  v, d = int(by["dense"]["vocab"]), int(by["dense"]["d_model"])
  # the lowrank arm has the rank whose V r + r d is closest to the MoS head's parameters
  r = int(by["lowrank"]["rank"])
  mos = int(by["mos"]["head_params"])
  assert all(abs(r * (v + d) - mos) <= abs(q * (v + d) - mos) for q in range(1, d + 1))
  assert int(by["dense"]["head_params"]) == v * d
  assert int(by["lowrank"]["head_params"]) == r * (v + d)
  assert all(np.isfinite(float(x["eval_loss"])) and int(x["steps"]) == 4 for x in rows)
  # seeds differ in init, so their losses differ
  assert len({r["eval_loss"] for r in rows if r["arm"] == "mos"}) == len(p.knobs.seeds)
  cfgs = dict(mos_text.arm_configs(p, str(out)))
  assert head_param_count(cfgs["mos"].model) == mos


def test_report_verdicts_match_scipy(out):
  rows = read_rows(out / mos_text.CSV)
  meta = json.loads((out / mos_text.META).read_text())
  text = mos_text.report_section(out, ".")
  loss = {a: [float(r["eval_loss"]) for r in rows if r["arm"] == a]
          for a in ("mos", "lowrank", "dense")}
  for other, key in (("lowrank", "params"), ("dense", "flops")):
    t = stats.ttest_ind(loss[other], loss["mos"], equal_var=False)
    lo, hi = t.confidence_interval(0.95)
    want = "supported" if lo > 0 else "refuted" if hi < 0 else "undecided"
    got = mos_text.comparisons(rows)[key]
    assert got["verdict"] == want
    assert got["lo"] == pytest.approx(lo, rel=1e-9) and got["hi"] == pytest.approx(hi, rel=1e-9)
    assert f"[{got['lo']:.4f}, {got['hi']:.4f}]" in text
  assert f"{np.mean(loss['mos']):.4f}" in text and "Scope and choices" in text
  assert str(meta["settings"]["steps"]) in mos_text.paragraph(rows, meta)
  assert (out / mos_text.report.FIG).exists()

