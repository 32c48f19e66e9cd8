"""The planted report reads only CSV/JSON: a hand-written planted.csv and meta record give the
knee, the three checks and the markdown table (no training)."""

import json

from experiments import planted as exp
from experiments.shared import write_rows

H = 2.0


def _write(out, gaps, floor_gaps, k=3):
  rows = [{"rank": r, "eval_loss": H + g + 0.01, "eval_acc": 0.5, "expected_loss": H + g,
           "floor": H + fg, "H": H, "gap": g, "floor_gap": fg}
          for (r, g), fg in zip(gaps.items(), floor_gaps)]
  write_rows(out / "planted.csv", rows)
  write_rows(out / "planted_floor.csv", [{"rank": r["rank"], "floor": r["floor"], "H": H,
                                          "floor_gap": r["floor_gap"], "grad_norm": 1e-7,
                                          "n_iter": 10, "converged": "True", "start": 0}
                                         for r in rows])
  (out / "planted_meta.json").write_text(json.dumps(
      {"settings": {"k": k, "tol": 0.05, "margin": 0.02, "vocab": 32}}))


def test_knee_and_checks_from_the_csv(tmp_path):
  _write(tmp_path, {1: 1.0, 2: 0.5, 4: 0.03, 16: 0.01}, [0.9, 0.45, 0.0, 0.0])
  s = exp.summarize(tmp_path)
  assert s["knee"] == 4 and s["knee_ok"] and s["high_ok"] and s["low_ok"]
  assert abs(s["high_max_gap"] - 0.03) < 1e-12
  assert abs(s["low_min_excess"] - 0.1) < 1e-12  # r <= k/2 is r = 1 only
  md = exp.report_section(tmp_path, "pl")
  assert "| 4 | 2.0400 | 0.5000 | 2.0300 | 2.0000 | 2.0000 | 0.0300 | 0.0000 |" in md
  assert "**4** (k + 1 = 4; within ±1: yes)" in md and "all converged" in md
  assert "follow the exact floor" in md and "planted_mix" not in md


def test_checks_fail_when_a_low_rank_beats_its_floor(tmp_path):
  # r = 1 ends below its floor gap by more than the margin; r = 16 stays 0.2 above H
  _write(tmp_path, {1: 0.5, 16: 0.2}, [0.9, 0.0])
  s = exp.summarize(tmp_path)
  assert s["knee"] is None and not s["knee_ok"] and not s["high_ok"] and not s["low_ok"]
  assert "do not meet every check above" in exp.report_section(tmp_path, "pl")
