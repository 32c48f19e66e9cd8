"""The planted report reads only CSV/JSON: a hand-written planted.csv and meta record give the
knee, the three checks and the markdown table (no training)."""

import json

import pytest

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


def test_mixture_seed_spread_and_verdict(tmp_path):
  # two seeds per arm: mos gaps 0.01, 0.02 (spread 0.01), matched lowrank 0.10, 0.11 (floor gap
  # 0.09); margin 0.09 > 5 × 0.01; an unmatched lowrank-d16 arm (more parameters) is ignored
  from experiments.planted import mix_stats
  def row(label, arm, seed, head, rank, params, gap, fg):
    return {"label": label, "arm": arm, "seed": seed, "head": head, "rank": rank,
            "head_params": params, "gap": gap, "floor_gap": fg}
  nan = float("nan")
  rows = [row("mos", "mos", 0, "mos", 0, 100, 0.01, nan),
          row("mos-s1", "mos", 1, "mos", 0, 100, 0.02, nan),
          row("lr", "lr", 0, "lowrank", 3, 99, 0.10, 0.09),
          row("lr-s1", "lr", 1, "lowrank", 3, 99, 0.11, 0.09),
          row("big", "big", 0, "lowrank", 8, 200, 0.001, 0.0)]
  a = {x["arm"]: x for x in mix_stats.arms(rows)}
  assert a["mos"]["n"] == 2 and abs(a["mos"]["mean"] - 0.015) < 1e-12
  assert abs(a["lr"]["spread"] - 0.01) < 1e-12
  v = mix_stats.verdict(rows)
  assert v["lowrank_arm"] == "lr" and abs(v["margin"] - 0.09) < 1e-12
  assert v["mos_beats"] and v["mos_within_tol"] and v["lowrank_at_or_above_floor"]
  assert v["margin_over_5_spread"]
  rows[1]["gap"] = 0.08  # spread 0.07: margin 0.055 < 5 × 0.07; mos mean 0.045 > 0.03
  v = mix_stats.verdict(rows)
  assert v["mos_beats"] and not v["margin_over_5_spread"] and not v["mos_within_tol"]
  one = mix_stats.verdict(rows[:1] + rows[2:3])  # one seed: no spread, no 5× claim
  assert one["seeds"] == 1 and one["mos_beats"] and not one["margin_over_5_spread"]
  assert mix_stats.verdict(rows[:1] + rows[4:5]) is None  # no matched lowrank arm
  old = {k: x for k, x in rows[0].items() if k not in ("arm", "seed")}  # a pre-seed CSV row
  assert mix_stats.arms([old])[0]["arm"] == "mos"


def test_mixture_lr_grid_takes_each_arm_at_its_best_lr():
  # mos at lr 0.01 (gaps 0.05, 0.06) and 0.03 (0.02, 0.024); lowrank at 0.01 (0.08, 0.081) and
  # 0.03 (0.09, 0.2): each arm is taken at its best mean, with every lr's mean kept
  from experiments.planted import mix_stats
  rows = [{"label": f"{a}-{lr}-{s}", "arm": a, "seed": s, "lr": lr, "head": h, "rank": r,
           "head_params": n, "gap": g, "floor_gap": fg}
          for a, h, r, n, fg, cells in (
              ("mos", "mos", 0, 100, float("nan"), ((0.01, (0.05, 0.06)), (0.03, (0.02, 0.024)))),
              ("low", "lowrank", 3, 99, 0.07, ((0.01, (0.08, 0.081)), (0.03, (0.09, 0.2)))))
          for lr, gaps in cells for s, g in enumerate(gaps)]
  a = {x["arm"]: x for x in mix_stats.arms(rows)}
  assert a["mos"]["lr"] == 0.03 and abs(a["mos"]["mean"] - 0.022) < 1e-12
  assert abs(a["mos"]["spread"] - 0.004) < 1e-12 and a["mos"]["n"] == 2
  assert a["low"]["lr"] == 0.01 and abs(a["low"]["by_lr"][0.03] - 0.145) < 1e-12
  v = mix_stats.verdict(rows)
  assert v["mos_within_tol"] and abs(v["margin"] - (0.0805 - 0.022)) < 1e-12
  assert abs(v["spread"] - 0.004) < 1e-12 and v["margin_over_5_spread"]


def test_unknown_part_is_refused_before_any_work(tmp_path):
  out = tmp_path / "never"
  with pytest.raises(ValueError, match=r"parts=\('foo',\); allowed: a non-empty subset"):
    exp.run(out, "test", verbose=False, parts=("foo",))
  with pytest.raises(ValueError, match="allowed: a non-empty subset"):
    exp.run(out, "test", verbose=False, parts=())
  assert not out.exists()
