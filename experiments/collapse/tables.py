"""The collapse experiment's tables, from the rows of collapse_models.csv: per metric R², r,
the partial r on log(parameters) and the pooled within-shape r (``within_shape``) with their
95% Fisher-z intervals, beside the authors' R² and sign (``ANCHORS``); the seed groups' r and
permutation p; the pre-registered rule (``decide``).

Interval verdicts (``ci_verdict``): a claimed sign is supported (refuted) when the 95% interval
excludes 0 on its (the other) side, else undecided; the authors' "no relation" is supported
when the interval lies inside ±sqrt(0.3) (R² ≤ 0.3), refuted when outside it.
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.studies import stats

# The authors' R² against validation loss and the sign of r they imply, computed from their
# released results table over 230 TinyStories models (not printed in the paper; None: no
# reference number): log CDNV = log10 of the mean CDNV, k = 2; UNC3 unguarded as theirs and
# guarded (NaN where |mean cos| < 3 SE); NC2 = the CoV of norms, raw and bias-corrected.
ANCHORS = {"nc1_log10_mean_cdnv": (0.92, +1), "nc4_agreement": (0.89, -1),
           "unc3_cos_cov": (0.69, +1), "unc3_cos_cov_guarded": (0.69, +1),
           "nc2_norm_cov": (0.08, 0), "nc2_norm_cov_corrected": (0.08, 0),
           "nc3_cos_mean": (None, None), "gnc2_log_kernel_mean": (None, None)}
# scalar metrics fitted against the loss (nc1_log10_mean_cdnv: log10 of the mean CDNV, the
# authors' statistic; nc1_mean_log10_cdnv: the mean over pairs of log10)
METRICS = ("nc1_cdnv", "nc1_log10_mean_cdnv", "nc1_mean_log10_cdnv", "nc1_mean_log10_cdnv_std",
           "nc2_norm_cov", "nc2_norm_cov_corrected", "nc2_log_norm_cov", "nc2_cos_mean",
           "nc2_cos_std", "etf_error", "gnc2_log_kernel_mean", "gnc2_log_kernel_var",
           "nc3_cos_mean", "unc3_cos_cov", "unc3_cos_cov_guarded", "dual_error", "nc4_agreement")
COUNT_KEYS = ("nc1_n_pairs", "nc1_n_coincident_pairs", "nc1_n_zero_pairs",
              "gnc2_n_coincident_pairs", "n_classes", "nc2_corrected_n_classes",
              "nc2_corrected_n_clipped", "unc3_ill_conditioned", "nc3_cos_se")
POINTS = ("last", "all")  # one point per run (its last snapshot) | every snapshot
NO_RELATION_R = math.sqrt(0.3)


def column(rows, key) -> np.ndarray:
  return np.asarray([float(r.get(key, np.nan)) for r in rows], np.float64)


def select(rows, kind: str, min_count=None, points: str = "all") -> list[dict]:
  """The rows of one kind (grid | seeds), at ``min_count``, every or only the last snapshot."""
  return [r for r in rows if r["kind"] == kind
          and (min_count is None or int(r["min_count"]) == int(min_count))
          and (points == "all" or int(r["last_snapshot"]) == 1)]


def r2_table(rows: list[dict], n_perm: int = 0, anchors: bool = True) -> list[dict]:
  """Per metric vs val_loss: n, R², Pearson r, the partial r with log(parameters) partialled
  out and the pooled within-shape r with their 95% intervals, the permutation p (``n_perm`` >
  0), the authors' R² and sign (``ANCHORS``; no sign without ``anchors``) and the verdicts of
  the intervals of r and the partial r on that sign (``ci_verdict``)."""
  y = column(rows, "val_loss")
  with np.errstate(divide="ignore", invalid="ignore"):
    z = np.log(column(rows, "n_params"))
  out = []
  for i, k in enumerate(METRICS):
    x = column(rows, k)
    ps = stats.partial_summary(x, y, z)
    a, sign = ANCHORS.get(k, (None, None))
    sign = sign if anchors else None
    r = {"metric": k, **stats.correlation_summary(x, y, n_perm=n_perm, seed=i),
         "partial_n": ps.pop("n"), **ps, **within_shape(rows, x, y),
         "paper_r2": "" if a is None else a,
         "paper_sign": {1: "+", -1: "-", 0: "none"}.get(sign, "")}
    out.append({**r, **{f"{p}ci_verdict": ci_verdict(sign, r[f"{p}ci_lo"], r[f"{p}ci_hi"])
                        for p in ("", "partial_")}})
  return out


def within_shape(rows, x, y) -> dict:
  """The pooled within-shape r: x and y centred within each architecture (n_layers, d_model)
  of two or more finite points, then Pearson r of the pooled deviations (size is constant
  within a shape); its 95% Fisher-z interval counts the shape means as controls
  (se = 1 / sqrt(n - 3 - (shapes - 1)))."""
  shape = np.asarray([(r["n_layers"], r["d_model"]) for r in rows]).reshape(-1, 2)
  each = [np.flatnonzero(np.isfinite(x) & np.isfinite(y) & (shape == s).all(1))
          for s in np.unique(shape, axis=0)]
  sel = [i for i in each if len(i) >= 2]
  dx, dy = ([np.zeros(0)] + [v[i] - v[i].mean() for i in sel] for v in (x, y))
  n, r = sum(map(len, sel)), float(stats.pearson(np.concatenate(dx), np.concatenate(dy)))
  lo, hi = stats.fisher_ci(r, n, n_controls=max(len(sel) - 1, 0))
  return {"within_n": n, "within_shapes": len(sel), "within_r": r, "within_ci_lo": lo,
          "within_ci_hi": hi}


def r2_rows(models: list[dict], min_counts) -> list[dict]:
  """collapse_r2.csv: the grid's table at every (min_count, points)."""
  return [{"min_count": m, "points": pts, **r} for m in min_counts for pts in POINTS
          for r in r2_table(select(models, "grid", m, pts))]


def seed_rows(models: list[dict], min_counts, n_perm: int) -> list[dict]:
  """collapse_seeds.csv: per seed-only group (one shape; last snapshot) and min_count, every
  metric's r, interval, "r ≠ 0?" verdict, permutation p, and the loss's mean and SD."""
  rows = []
  for g in dict.fromkeys(r["group"] for r in select(models, "seeds")):
    for m in min_counts:
      sel = [r for r in select(models, "seeds", m, "last") if r["group"] == g]
      if len(sel) < 3:
        continue
      loss = column(sel, "val_loss")
      head = {"group": g, "n_layers": int(sel[0]["n_layers"]), "d_model": int(sel[0]["d_model"]),
              "min_count": m, "val_loss_mean": float(np.nanmean(loss)),
              "val_loss_sd": float(np.nanstd(loss, ddof=1))}
      rows += [{**head, **r} for r in r2_table(sel, n_perm=n_perm, anchors=False)]
  return rows


def ci_verdict(sign, lo, hi) -> str:
  """The authors' claim (``sign``) against our 95% interval of r (module doc); no claim: the
  sign of r alone."""
  c = stats.ci_sign(lo, hi)
  if not np.isfinite(c):
    return "undefined (no interval: too few points)"
  if sign is None:
    return {1.0: "r > 0", -1.0: "r < 0", 0.0: "sign undecided"}[c]
  if sign == 0:
    if -NO_RELATION_R < lo and hi < NO_RELATION_R:
      return "supported"
    return "refuted" if (lo >= NO_RELATION_R or hi <= -NO_RELATION_R) else "undecided"
  return "undecided" if c == 0 else ("supported" if c == sign else "refuted")


VERDICTS = ("the disagreements belong to the regime", "the reversals are robust at small scale",
            "undecided")


def rule_intervals(r2: list[dict], rule) -> dict:
  """{"metric@min_count r|partial r": [lo, hi]}: the 95% intervals ``decide`` reads, of the
  grid's r and partial r on log(parameters), one point per run (collapse_r2.csv's rows)."""
  by = {(r["metric"], int(r["min_count"])): r for r in r2 if r["points"] == "last"}
  return {f"{k}@{m} {p}r": [float(by[(k, m)][f"{q}ci_lo"]), float(by[(k, m)][f"{q}ci_hi"])]
          for k, _ in rule.signs for m in rule.min_counts
          for p, q in (("", ""), ("partial ", "partial_"))}


def decide(intervals: dict, rule) -> dict:
  """The pre-registered rule: for NC3's mean cosine, UNC3 and GNC2's mean log kernel, the 95%
  Fisher-z intervals of r against validation loss and of the partial r on log(parameters),
  one point per run, at min_count 1 and 20 (``Rule``). An interval is on the authors' side
  when it excludes 0 on the side of their sign (NC3 -, UNC3 +, GNC2 +), on the other side when
  it excludes 0 there. All on the authors' side: "the disagreements belong to the regime"; all
  on the other side: "the reversals are robust at small scale"; anything else (an interval
  spanning 0 or undefined): "undecided"."""
  sign = dict(rule.signs)
  sides = {c: int(np.nan_to_num(stats.ci_sign(*iv)) * sign[c.split("@")[0]])
           for c, iv in intervals.items()}
  on = {v: [c for c, s in sides.items() if s == v] for v in (1, -1, 0)}
  verdict = VERDICTS[0] if len(on[1]) == len(sides) else (
      VERDICTS[1] if len(on[-1]) == len(sides) else VERDICTS[2])
  return {"verdict": verdict, "sides": sides, "reason": "; ".join(
      f"{what} ({len(on[v])} of {len(sides)}): " + ", ".join(on[v]) for v, what in (
          (1, "the authors' side"), (-1, "the other side"), (0, "spanning 0 or undefined"))
      if on[v])}
