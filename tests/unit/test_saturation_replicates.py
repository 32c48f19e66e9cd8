"""The saturation replicates (issue 33 item 1): the cpu-replicates preset's arms (seed 0 is
cpu-planted's arm, the same Config) and the replicates paragraph, checked against a written
planted_arms.csv both ways (no training)."""

import numpy as np
from scipy import stats

from experiments.saturation import planted_replicates as rep
from experiments.saturation.planted_presets import Arm, arm_config, get_planted_preset
from experiments.saturation.planted_report import _split
from experiments.shared import read_rows, write_rows

LANG = {"vocab": 256, "zipf": 1.0}


def test_seed0_is_cpu_planted_and_seeds_change_init_and_order_only():
  old, new = get_planted_preset("cpu-planted"), get_planted_preset("cpu-replicates")
  names = [a.name for a in new.knobs.arms]
  assert len(set(names)) == len(names) and "d8-wd0.1" in names and "d64-wd0.1-s2" in names
  for d in (8, 64):
    assert arm_config(new, Arm(d, 0.1)) == arm_config(old, Arm(d, 0.1))
    c0, c2 = arm_config(new, Arm(d, 0.1)), arm_config(new, Arm(d, 0.1, seed=2))
    assert (c2.train.seed, c2.train.data_seed) == (2, 2)
    assert c2.data == c0.data and c2.model == c0.model and c2.train.steps == c0.train.steps
  tail = [a for a in new.knobs.arms if a.lang]
  assert sorted(a.d for a in tail) == [8, 32]
  c = arm_config(new, tail[0])
  assert (c.model.vocab_size, c.data.options.vocab, c.data.options.zipf) == (1024, 1024, 1.5)
  assert c.data.options.rank == 8 and c.data.options.mix == 4  # the rest as cpu-planted
  assert c.train.steps == arm_config(old, Arm(8, 0.1)).train.steps


def row(d, seed, rise, lo, hi, verdict, vocab=256, zipf=1.0):
  return {"arm": f"d{d}-wd0.1" + (f"-v{vocab}" if vocab != 256 else "") + (f"-s{seed}" if seed
                                                                             else ""),
          "d": d, "weight_decay": 0.1, "dtype": "float32", "seed": seed, "vocab": vocab,
          "zipf": zipf, "gamma_total": 7.9, "rise": rise, "rise_ci_lo": lo, "rise_ci_hi": hi,
          "rise_verdict": verdict, "final_expected_loss": 3.0, "floor_gap": 0.1,
          "gap_to_floor": 0.07}


def csv_rows(tmp_path, rows):
  write_rows(tmp_path / "planted_arms.csv", rows)
  return read_rows(tmp_path / "planted_arms.csv")


D64 = [(0.0119, 0.0104, 0.0136), (0.0031, 0.0020, 0.0050), (0.0080, 0.0061, 0.0101)]


def test_seed_stats_against_scipy(tmp_path):
  rows = csv_rows(tmp_path, [row(64, s, *r, "no") for s, r in enumerate(D64)])
  s = rep.seed_stats(rows)
  r = np.array([x[0] for x in D64])
  lo, hi = stats.t.interval(0.95, 2, loc=r.mean(), scale=stats.sem(r))
  assert np.isclose(s["t_lo"], lo) and np.isclose(s["t_hi"], hi)
  assert np.isclose(s["sd"], np.sqrt(((r - r.mean()) ** 2).sum() / 2))
  assert np.isclose(s["half"], np.mean([(h - l) / 2 for _, l, h in D64]))
  assert (s["n"], s["n_rise"], s["n_clear0"], s["verdict"]) == (3, 0, 3, "refuted")


def test_replicates_text_both_ways(tmp_path):
  d8 = [row(8, s, 0.004 + s / 1000, 0.003, 0.007, "no") for s in range(3)]
  d64 = [row(64, s, *r, "no") for s, r in enumerate(D64)]
  tail = [row(8, 0, 0.002, 0.001, 0.004, "no", vocab=1024, zipf=1.5)]
  t = rep.replicates_text(csv_rows(tmp_path, d8 + d64 + tail), LANG, 0.02)
  assert "V 256, Zipf 1, d 64, λ 0.1: 0 of 3 seeds rise by ≥ 0.02 nats" in t
  assert "late rise is **refuted** for this arm" in t and "**supported**" not in t
  assert "Verdict on the late rise over the replicated arms: **refuted**" in t
  assert "d 8 (V 256, Zipf 1, Γ 7.9), d 64 (V 256, Zipf 1, Γ 7.9), 3/3 seeds" in t
  assert "V 1024, Zipf 1.5, d 8, λ 0.1: 0 of 1 seed rises" in t and "not replicated" in t
  assert "covers evaluation noise only" in t and "other variance" in t
  assert "3 of 3 CIs clear 0" in t  # d64: every CI above 0, none above 0.02
  assert "(rises 0.0119 / 0.0031 / 0.008 nats, seeds 0/1/2)" in t
  assert "(no rise in its one seed, rise 0.002 nats; not replicated)" in t
  # every d64 seed rises: supported for d64, mixed over the widths
  d64 = [row(64, s, 0.05, 0.03, 0.07, "yes") for s in range(3)]
  t = rep.replicates_text(csv_rows(tmp_path, d8 + d64), LANG, 0.02)
  assert "d 64, λ 0.1: 3 of 3 seeds rise" in t and "**supported** for this arm" in t
  assert "replicated arms: **mixed across widths**" in t
  # one of three: undecided
  d64[1:] = [row(64, s, 0.004, 0.003, 0.006, "no") for s in (1, 2)]
  t = rep.replicates_text(csv_rows(tmp_path, d64), LANG, 0.02)
  assert "1 of 3 seeds rise" in t and "**undecided**" in t
  assert "1 of 1 seed rises" in rep.replicates_text(d64[:1], LANG, 0.02)


def test_split_keeps_seed0_of_the_preset_language(tmp_path):
  rows = csv_rows(tmp_path, [row(8, 0, *D64[0], "no"), row(8, 1, *D64[1], "no"),
                             row(8, 0, *D64[2], "no", vocab=1024, zipf=1.5)])
  base, others = _split(rows, LANG)
  assert [a["arm"] for a in base] == ["d8-wd0.1"]
  assert [a["arm"] for a in others] == ["d8-wd0.1-s1", "d8-wd0.1-v1024"]
  old = [{k: v for k, v in r.items() if k not in ("seed", "vocab", "zipf")} for r in rows]
  assert len(_split(old, LANG)[0]) == 3  # a CSV from before the replicates: all base
