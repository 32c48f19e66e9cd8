"""The generated readings (issue 17, must-show 4): which of the paper's claims the numbers
support or contradict and what the arms imply about cause, from constructed CSV rows (no
training): the layer stabilisation (convergence), the Γ regime of the convergence runs and the
selection history of the planted mixture (issue 33). A reading that ignored its numbers would
fail both directions."""

import numpy as np
import pytest
from scipy.stats import pearsonr

from experiments.convergence.report import claims_text as conv_claims
from experiments.planted.mix_stats import verdict as mix_verdict
from experiments.planted.report import selection_text


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


def models_csv(n_params, loss, metric):
  """collapse_models.csv rows of one min_count (last snapshots): val_loss, n_params and every
  anchor metric equal to ``metric`` (NaN elsewhere)."""
  from experiments.collapse.measure import METRICS
  return [{"n_params": p, "val_loss": v, **{k: np.nan for k in METRICS},
           **{k: m for k in ("nc1_log10_mean_cdnv", "nc2_norm_cov", "nc3_cos_mean")}}
          for p, v, m in zip(n_params, loss, metric)]


def collapse_paragraph(rows):
  from experiments.collapse import findings as F
  from experiments.collapse.tables import anchor_rows, r2_table
  r2 = [{"min_count": 1, "points": pts, **r} for pts in ("last", "all") for r in r2_table(rows)]
  an = anchor_rows(r2)
  return F.interval_sentence(an, 1), {r["metric"]: r for r in an}


def test_collapse_interval_verdicts_both_ways():
  """The collapse paragraph's supported / refuted / undecided follows the 95% interval of r:
  a strong positive relation supports the authors' + sign of log CDNV and refutes their 'no
  relation' for the norm CoV; a negative one refutes log CDNV; noise is undecided."""
  from experiments.collapse.findings import ci_text
  rng = np.random.default_rng(0)
  n = 16
  params = np.exp(rng.uniform(7, 12, size=n))
  loss = 4.0 - 0.1 * np.log(params) + 0.2 * rng.normal(size=n)
  metric = 2.0 * loss + 0.05 * rng.normal(size=n)
  t, an = collapse_paragraph(models_csv(params, loss, metric))
  a = an["nc1_log10_mean_cdnv"]
  ci = pearsonr(metric, loss).confidence_interval()
  assert (a["ci_lo"], a["ci_hi"]) == pytest.approx((ci.low, ci.high), abs=1e-9) and ci.low > 0
  sup = t.split(". With log(parameters)")[0]
  assert "supported: nc1_log10_mean_cdnv (" + ci_text(a["pearson_r"], a["ci_lo"], a["ci_hi"]) in sup
  assert "refuted: nc2_norm_cov" in sup and "nc3_cos_mean (r +1.00" in sup and "r > 0" in sup
  t, an = collapse_paragraph(models_csv(params, loss, -loss + 0.01 * rng.normal(size=n)))
  assert "refuted: nc1_log10_mean_cdnv" in t.split(". With log(parameters)")[0]
  noise = rng.normal(size=n)
  t, an = collapse_paragraph(models_csv(params, loss, noise))
  a = an["nc1_log10_mean_cdnv"]
  assert a["ci_lo"] < 0 < a["ci_hi"] and a["ci_verdict"] == "undecided"
  assert "undecided: nc1_log10_mean_cdnv" in t.split(". With log(parameters)")[0]
  # three runs of one size: no interval, no partial r, and the paragraph says so
  t, an = collapse_paragraph(models_csv([1e4] * 3, loss[:3], loss[:3]))
  assert an["nc1_log10_mean_cdnv"]["ci_verdict"].startswith("undefined")
  assert "undecided (no interval): nc1_log10_mean_cdnv (r +1.00 [–])" in t


def test_collapse_partial_r_removes_size():
  """A metric that follows the loss only through size: r is supported, the partial r on
  log(parameters) is not (its interval spans 0)."""
  rng = np.random.default_rng(3)
  n = 24
  lp = rng.uniform(7, 12, size=n)
  loss = 4.0 - 0.2 * lp + 0.05 * rng.normal(size=n)
  metric = 0.5 * lp + 0.05 * rng.normal(size=n)  # size alone
  t, an = collapse_paragraph(models_csv(np.exp(lp), loss, metric))
  a = an["nc1_log10_mean_cdnv"]
  assert a["ci_verdict"] == "refuted" and a["pearson_r"] < -0.9  # the + sign is refuted by r
  assert a["partial_ci_lo"] < 0 < a["partial_ci_hi"] and a["partial_verdict"] == "undecided"
  assert "undecided: nc1_log10_mean_cdnv" in t.split("With log(parameters) partialled out")[1]


def test_collapse_sign_sentence_both_ways():
  from experiments.collapse import findings as F
  pos = F.sign_sentence([{"nc3_cos_mean": 0.97}, {"nc3_cos_mean": 0.98}, {"nc3_cos_mean": "nan"}])
  assert "over these 2 runs is +0.975 (range +0.970 to +0.980), positive" in pos
  neg = F.sign_sentence([{"nc3_cos_mean": -0.5}, {"nc3_cos_mean": -0.62}])
  assert "is -0.560" in neg and "negative: the head's rows point, on average, against" in neg
  assert F.sign_sentence([{"nc3_cos_mean": float("nan")}]) == ""
