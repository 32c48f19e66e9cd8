"""The generated readings (issue 17, must-show 4): which of the paper's claims the numbers
support or contradict and what the arms imply about cause, from constructed CSV rows (no
training): the planted arms (saturation), the text widths (saturation) and the layer
stabilisation (convergence), the Γ regime of the convergence runs and the selection history of
the planted mixture (issue 33). A reading that ignored its numbers would fail both directions."""

import numpy as np

from experiments.convergence.report import claims_text as conv_claims
from experiments.saturation.planted_measure import account
from experiments.saturation.planted_reading import NOT_REPRODUCED, arm_trajectory, reading
from experiments.planted.mix_stats import verdict as mix_verdict
from experiments.planted.report import selection_text
from experiments.saturation.report import claims_text as text_claims

KNOBS = {"after": 0.3, "threshold": 0.02, "kl_jump": 1.0, "anisotropy_level": 0.9}
STEPS = [0, 100, 300, 500, 700, 800, 900, 1000]
FLOOR = {8: 3.59, 16: 3.20, 64: 2.98}


def arm(d, wd, rise, dtype="float32"):
  """One planted_arms.csv row and its checkpoints: a decay to floor + 0.05, plus (rise) a
  0.1-nat bump at 80-100% with a KL jump of 2 nats and anisotropy 0.95."""
  name = f"d{d}-wd{wd:g}" + ("-bf16" if dtype != "float32" else "")
  loss = [FLOOR[d] + 0.05 + 2.0 * np.exp(-s / 100) + (0.1 if rise and s >= 800 else 0.0)
          for s in STEPS]
  ck = [{"step": s, "expected_loss": v, "anisotropy_last": 0.95 if rise and s >= 800 else 0.2,
         "kl_raw": 0.3 + (2.0 if rise and s >= 800 else 0.0), "kl_centred": 0.1}
        for s, v in zip(STEPS, loss)]
  row = {"arm": name, "d": float(d), "weight_decay": wd, "dtype": dtype, "steps": 1000,
         "gamma_total": 79.0 * wd, "rise": 0.1 if rise else 0.004,
         "rise_verdict": "yes" if rise else "no", "coincidence": "yes" if rise else "n/a",
         "final_expected_loss": loss[-1], "floor": FLOOR[d], "gap_to_floor": loss[-1] - FLOOR[d]}
  return row, ck


def planted(spec):
  rows, cks = zip(*(arm(*s) for s in spec))
  return list(rows), {r["arm"]: c for r, c in zip(rows, cks)}


def test_trajectory_numbers():
  row, ck = arm(8, 0.1, True)
  t = arm_trajectory(row, ck, 0.3)
  assert np.isclose(t["kl_rise_raw"], 2.0) and t["kl_rise_centred"] == 0.0
  assert t["max_anisotropy"] == 0.95
  assert np.isclose(t["late_fall"], ck[4]["expected_loss"] - ck[-1]["expected_loss"])


def test_planted_null_contradicts_and_names_neither():
  rows, ck = planted([(8, 0.1, False), (16, 0.1, False), (64, 0.1, False), (8, 0.03, False),
                      (64, 0.03, False), (8, 0.1, False, "bfloat16")])
  acc = account(rows)
  text = reading(rows, ck, KNOBS, acc)
  sup, con = text.split(NOT_REPRODUCED + ":")
  assert acc == "neither" and "Cause: neither Γ" in text
  assert "small models saturate" in con and "small models saturate" not in sup
  assert "bottleneck sets the level" in sup  # final losses ordered by floor(d)
  assert "anisotropy after 30% of training is 0.2" in con
  assert "bfloat16 vs float32 compute (d8-wd0.1-bf16 vs d8-wd0.1)" in text


def test_planted_width_rise_supports_and_names_width():
  rows, ck = planted([(8, 0.1, True), (16, 0.1, True), (64, 0.1, False), (8, 0.03, True),
                      (64, 0.03, False)])
  acc = account(rows)
  text = reading(rows, ck, KNOBS, acc)
  sup, con = text.split(NOT_REPRODUCED + ":")
  assert acc == "width" and "Cause: the rise follows the width" in text
  assert "small models saturate" in sup and "every rising arm shows both" in sup
  assert "larger models do not saturate" in sup and "small models" not in con


def text_row(width, in_fit, verdict, lo, hi, gamma=0.2):
  return {"width": width, "in_fit": in_fit, "rise_verdict": verdict, "gap_final_ci_lo": lo,
          "gap_final_ci_hi": hi, "kl_best": 0.3, "kl_final": 0.35, "anisotropy_best": 0.2,
          "anisotropy_final": 0.3, "gamma_total": gamma}


def test_text_saturation_claims():
  rows = [text_row(16, False, "no", 1.0, 3.0), text_row(64, True, "no", np.nan, np.nan),
          text_row(128, True, "no", np.nan, np.nan)]
  t = text_claims(rows, paired=True)
  sup, con = t.split("Contradicted:")
  assert "lie above the scaling law" in sup and "saturate (a late rise) (d=16 no)" in con
  assert "cannot test the Γ account" in t and "Γ_total = λΣη = 0.2" in t
  rows[0].update(rise_verdict="yes", gap_final_ci_lo=-1.0)
  t = text_claims(rows, paired=True)
  assert "saturate (a late rise) (d=16 yes)" in t.split("Contradicted:")[0]
  assert "Undecided" in t and "[-1.00, +3.00]%" in t


def model(name, width, med, share):
  return {"model": name, "width": width, "median_stabilisation_frac": med,
          "share_stabilised_by_paper_frac": share}


def stab(rho, p):
  base = {"tokens": "last", "estimator": "biased", "per": "per_weights_final"}
  return [{**base, "model": "d64", "kind": "mlp", "n": 4, "spearman": rho, "p_perm": 0.08},
          {**base, "model": "stratified", "kind": "mlp+ov", "n": 16, "spearman": rho, "p_perm": p}]


def test_convergence_claims():
  ms = [model("d16", 16, 0.6, 0.0), model("d64", 64, 0.1, 0.75)]
  t = conv_claims(ms, stab(-0.8, 0.01), "last", "biased", {"d16": 7.9, "d64": 7.9})
  sup, con = t.split("Contradicted:")
  assert "within ~20% of training" in sup and "75% of its layers" in sup
  assert "larger models stabilise earlier" in sup and "low-PER layers stabilise later" in sup
  assert "above the 2.4–4.7 of the larger Pythias" in t and "small Pythias' 7.9" in t
  assert "matches" not in t
  ms = [model("d16", 16, 0.3, 0.0), model("d64", 64, 0.5, 0.0)]
  t = conv_claims(ms, stab(0.2, 0.4), "last", "biased", {"d16": 0.11, "d64": 0.11})
  sup, con = t.split("Contradicted:")
  assert "within ~20%" in con and "larger models stabilise earlier" in con
  assert "not significant" in t and "far below" in t
  ms.insert(1, model("d32", 32, 0.6, 0.0))  # d16 0.3, d32 0.6, d64 0.5: no monotone order
  t = conv_claims(ms, stab(0.2, 0.4), "last", "biased", {})
  assert "no monotone order, Spearman 0.50" in t.split("Not decided:")[1] and "Cause" not in t


def test_convergence_gamma_regime_both_ways():
  """7.9 is the small Pythias' Γ: only Γ in 2.4–4.7 is the regime of the 20% claim."""
  ms = [model("d16", 16, 0.3, 0.0), model("d64", 64, 0.1, 0.75)]
  regime = lambda g: conv_claims(ms, stab(-0.8, 0.01), "last", "biased",  # noqa: E731
                                 {"d16": g, "d64": g}).split("Cause:")[1]
  assert "lies within the 2.4–4.7" in regime(3.0) and "matches the one of the paper" in regime(3.0)
  assert "above the 2.4–4.7" in regime(7.9) and "matches" not in regime(7.9)
  assert "far below the 2.4–4.7" in regime(0.11)
  t = conv_claims(ms, stab(-0.8, 0.01), "last", "biased", {"d16": 0.11, "d64": 3.0})
  assert "spans the 2.4–4.7" in t


def mix_rows(mos_gaps, low_gaps, floor_gap=0.0418, h=2.6584):
  """planted_mix.csv rows: a mos arm (2912 parameters) and the matched lowrank r = 11."""
  rows = []
  for head, gaps, rank, n, fg in (("mos", mos_gaps, 0, 2912, float("nan")),
                                  ("lowrank", low_gaps, 11, 2992, floor_gap)):
    for seed, g in enumerate(gaps):
      rows.append({"label": head if seed == 0 else f"{head}-s{seed}", "arm": head, "seed": seed,
                   "lr": 0.1, "head": head, "rank": rank, "head_params": n, "gap": g,
                   "floor_gap": fg, "H": h})
  return rows


MOS_K4 = {"kind": "planted_mos", "n_mix": 8, "rank": 4, "alpha": 8.0}


def test_planted_selection_history_both_ways():
  v = mix_verdict(mix_rows([0.0169, 0.0145], [0.0437, 0.0454]))
  t = selection_text(MOS_K4, v)
  assert "k = 8" in t and "0.0463–0.0470" in t and "0.0489–0.0553" in t  # the history
  assert "changed to M = 8, k = 4" in t and "says nothing about k = 8" in t
  assert t.endswith("MoS − H = 0.0157, within 0.03.")
  v = mix_verdict(mix_rows([0.0412, 0.0398], [0.0437, 0.0454]))
  assert selection_text(MOS_K4, v).endswith("MoS − H = 0.0405, not within 0.03.")
  k8 = {**MOS_K4, "rank": 8}
  assert selection_text(k8, v).endswith("not within 0.03, as in the history's fits.")
  assert "This run is at the guide's k = 8" in selection_text(k8, v)
  v = mix_verdict(mix_rows([0.02, 0.021], [0.0437, 0.0454]))
  assert selection_text(k8, v).endswith("within 0.03, unlike the history's fits.")
  assert selection_text(None, v) == "" and selection_text(MOS_K4, None) == ""
