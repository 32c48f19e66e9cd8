"""The collapse rule (``tables.decide``): each branch, and the report's reading of a trend reversal."""

import importlib

import pytest

from experiments.collapse import tables as T
from experiments.collapse.presets import Rule
from experiments.common import write_rows

R = importlib.import_module("experiments.collapse.report")  # the package exports report()
AUTHORS = {"nc3_cos_mean": (-0.9, -0.2), "unc3_cos_cov": (0.2, 0.9), "gnc2_log_kernel_mean": (0.1, 0.8)}


def _intervals(flip: bool = False, **cells) -> dict:
  """The rule's intervals of collapse_r2.csv rows, each on the authors' side (``flip``: the
  other side), then ``cells`` ("metric@min_count r" -> [lo, hi]) over them."""
  rows = [{"metric": k, "min_count": m, "points": p, "ci_lo": lo, "ci_hi": hi,
           "partial_ci_lo": lo, "partial_ci_hi": hi}
          for k, (lo, hi) in AUTHORS.items() for m in (1, 20) for p in ("last", "all")]
  iv = T.rule_intervals(rows, Rule())
  return {c: [-b, -a] if flip else [a, b] for c, (a, b) in iv.items()} | cells


NAN = [float("nan")] * 2


@pytest.mark.parametrize("iv, verdict, pending", [
    (_intervals(), "the disagreements belong to the regime", []),
    (_intervals(flip=True), "the reversals are robust at small scale", []),
    (_intervals(flip=True, **{"gnc2_log_kernel_mean@20 partial r": [-0.3, 0.4]}), "undecided",
     ["gnc2_log_kernel_mean@20 partial r"]),
    (_intervals(**{"nc3_cos_mean@1 r": NAN}), "undecided", ["nc3_cos_mean@1 r"]),
    (_intervals(**{"unc3_cos_cov@1 r": [-0.9, -0.2]}), "undecided", [])])
def test_decide_each_branch(iv, verdict, pending):
  """All 12 intervals (3 metrics x min_count 1, 20 x r, partial r) on the authors' side, all
  on the other side, or anything else (one spanning 0, one undefined, one reversed)."""
  d = T.decide(iv, Rule())
  assert d["verdict"] == verdict and len(d["sides"]) == 12
  assert [c for c, v in d["sides"].items() if v == 0] == pending
  assert all(c in d["reason"].split("spanning 0")[-1] for c in pending)


@pytest.mark.parametrize("nc3_mean, reading", [(0.5, "a reversal is one of the trend, not of NC3's sign"),
                                                (-0.1, "UNC3's r is not comparable with theirs")])
def test_report_reads_a_reversal_as_a_trend(tmp_path, nc3_mean, reading):
  """Every interval reversed with NC3's means positive: the better models are less self-dual
  and less uniform (a trend), not "NC3's sign"; a negative NC3 mean makes UNC3 incomparable."""
  write_rows(tmp_path / "collapse_models.csv", [
      {"kind": "grid", "last_snapshot": 1, "nc3_cos_mean": nc3_mean + 0.1 * i} for i in range(4)])
  s = {"rule": {"text": "RULE"}, "decision": T.decide(_intervals(flip=True), Rule())}
  md = " ".join(R.rule_lines(tmp_path, s))
  assert "Verdict: the reversals are robust at small scale" in md and reading in md
  for what in ("self-dual (NC3)", "uniform in duality (UNC3)", "uniform on the sphere (GNC2)"):
    assert f"less {what} (reversed)" in md
