"""benchmarks/step_flops.py: XLA's flop count of the device presets' step programs (lowered,
not compiled). At test size: vocab_threshold gpu-test's padded head population of 4 members on
a frozen trunk costs one trunk forward plus 4 heads, less than each member recomputing the
trunk; that unshared count is 4 single-member runs' (the vmapped step is the single step
4 times), and the PFLOP total is flops per step x steps."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import step_flops as sf  # noqa: E402
import step_timing as st  # noqa: E402
from sbjax.train import resolve_vocab  # noqa: E402


def test_counts_the_shared_trunk_population(tmp_path):
  res = sf.main(["--runs=vocab_threshold:gpu-test", "--out", str(tmp_path)])
  runs = {r["run"]: r for r in res["runs"]}
  assert set(runs) == {"V96-trunk", "V96-heads-pad4", "V128-trunk", "V128-heads-pad4"}
  for r in runs.values():
    assert r["flops_per_step"] > 0
    assert r["pflop"] == pytest.approx(r["flops_per_step"] * r["steps"] / 1e15)
  heads = runs["V96-heads-pad4"]
  assert heads["members"] == 4 and heads["unshared_flops_per_step"] > heads["flops_per_step"]
  total = sum(r["pflop"] for r in runs.values())
  assert res["presets"]["vocab_threshold:gpu-test"]["pflop"] == pytest.approx(total)
  assert json.loads((tmp_path / "step_flops.json").read_text())["runs"] == res["runs"]
  # the unshared population is the single-member step vmapped: 4 x one member's count
  (run,) = [r for r in st.plan("vocab_threshold:gpu-test", 0, tmp_path / "t")
            if r.name == "V96-heads-pad4"]
  one = sf.step_flops([resolve_vocab(run.cfgs[0], run.datasets[0].vocab_size)])
  assert heads["unshared_flops_per_step"] == pytest.approx(4 * one, rel=0.05)
