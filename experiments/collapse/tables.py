"""The statistics tables of the collapse experiment, from the rows of collapse_models.csv: per
metric R², Pearson r and the partial r on log(parameters) with their 95% Fisher-z intervals;
the seed groups' r and permutation p; the anchor table against the authors' R²; the tokens.

Verdicts follow from an interval (``sbjax.studies.stats.ci_sign``): a claimed sign is supported
(refuted) when the 95% interval of r excludes 0 on its (the other) side, else undecided; the
authors' "no relation" is supported when the interval lies inside ±sqrt(0.3) (R² ≤ 0.3),
refuted when outside it. The point verdict compares R²: ours ≥ theirs − 0.25 agrees.
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.studies import stats

# The authors' R² against validation loss and the sign of r they imply (computed from the
# authors' released results table over 230 TinyStories models, not figures printed in the
# paper; None: no reference number). Our metric -> (authors' R², authors' sign, what it is).
ANCHORS = {
    "nc1_log10_mean_cdnv": (0.92, +1, "log10 of the mean CDNV, k=2 (the authors' log CDNV)"),
    "nc4_agreement": (0.89, -1, "NC4 agreement"),
    "unc3_cos_cov": (0.69, +1, "UNC3 = std/mean of cos(w_c, mu~_c), unguarded (as the authors)"),
    "unc3_cos_cov_guarded": (0.69, +1, "UNC3, NaN where |mean cos| < 3 SE"),
    "nc2_norm_cov": (0.08, 0, "CoV of norms (NC2), raw"),
    "nc2_norm_cov_corrected": (0.08, 0, "CoV of norms (NC2), bias-corrected"),
    "nc3_cos_mean": (None, None, "NC3 mean self-duality cos(w_c, mu~_c)"),
    "gnc2_log_kernel_mean": (None, None, "GNC2 mean log kernel (hyperspherical uniformity)"),
}
ANCHOR_SOURCE = "computed from the authors' results"
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
TOP_TOKENS = 10


def column(rows, key) -> np.ndarray:
  return np.asarray([float(r.get(key, np.nan)) for r in rows], np.float64)


def select(rows, kind: str, min_count=None, points: str = "all") -> list[dict]:
  """The rows of one kind (grid | seeds), at ``min_count``, every or only the last snapshot."""
  return [r for r in rows if r["kind"] == kind
          and (min_count is None or int(r["min_count"]) == int(min_count))
          and (points == "all" or int(r["last_snapshot"]) == 1)]


def r2_table(rows: list[dict], n_perm: int = 0) -> list[dict]:
  """Per metric vs val_loss: n, R², Pearson r with its 95% interval, the partial r with
  log(parameters) partialled out and its interval, the permutation p (``n_perm`` > 0)."""
  y = column(rows, "val_loss")
  with np.errstate(divide="ignore", invalid="ignore"):
    z = np.log(column(rows, "n_params"))
  out = []
  for i, k in enumerate(METRICS):
    x = column(rows, k)
    ps = stats.partial_summary(x, y, z)
    a = ANCHORS.get(k, (None,))[0]
    out.append({"metric": k, **stats.correlation_summary(x, y, n_perm=n_perm, seed=i),
                "partial_n": ps.pop("n"), **ps, "paper_r2": "" if a is None else a})
  return out


def r2_rows(models: list[dict], min_counts) -> list[dict]:
  """collapse_r2.csv: the grid's table at every (min_count, points)."""
  return [{"min_count": m, "points": pts, **r} for m in min_counts for pts in POINTS
          for r in r2_table(select(models, "grid", m, pts))]


def seed_verdict(lo, hi) -> str:
  c = stats.ci_sign(lo, hi)
  if not math.isfinite(c):
    return "undefined (no interval: too few seeds)"
  return {1.0: "r > 0", -1.0: "r < 0", 0.0: "not distinguishable from 0"}[c]


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
      rows += [{**head, **r, "ci_verdict": seed_verdict(r["ci_lo"], r["ci_hi"])}
               for r in r2_table(sel, n_perm=n_perm)]
  return rows


def point_verdict(metric: str, r2: float, r: float) -> str:
  anchor, sign, _ = ANCHORS[metric]
  if anchor is None:
    return "no reference value"
  if not np.isfinite(r2):
    return "undefined here"
  if sign == 0:
    return "agrees (no relation)" if r2 <= 0.3 else f"disagrees (R² {r2:.2f} is not negligible)"
  if np.sign(r) != sign:
    return "disagrees (opposite sign)"
  return "agrees" if r2 >= anchor - 0.25 else "same sign, weaker"


def ci_verdict(sign, lo, hi) -> str:
  """The authors' claim (``sign``) against our 95% interval of r (module doc); no claim: the
  sign of r alone."""
  c = stats.ci_sign(lo, hi)
  if not np.isfinite(c):
    return "undefined (no interval: too few runs or one size)"
  if sign is None:
    return {1.0: "r > 0", -1.0: "r < 0", 0.0: "sign undecided"}[c]
  if sign == 0:
    if -NO_RELATION_R < lo and hi < NO_RELATION_R:
      return "supported"
    return "refuted" if (lo >= NO_RELATION_R or hi <= -NO_RELATION_R) else "undecided"
  return "undecided" if c == 0 else ("supported" if c == sign else "refuted")


def anchor_rows(r2: list[dict]) -> list[dict]:
  """collapse_anchors.csv: per anchor metric and min_count, ours (one point per run; the
  all-snapshot R² beside it) against the authors', with the point and interval verdicts."""
  by = {(int(r["min_count"]), r["points"], r["metric"]): r for r in r2}
  out = []
  for m in sorted({k[0] for k in by}):
    for k, (a, sign, what) in ANCHORS.items():
      last, allp = by[(m, "last", k)], by[(m, "all", k)]
      r2v, rv = float(last["r2"]), float(last["pearson_r"])
      lo, hi, plo, phi = (float(last[c]) for c in ("ci_lo", "ci_hi", "partial_ci_lo",
                                                   "partial_ci_hi"))
      out.append({"metric": k, "what": what, "min_count": m, "n_runs": last["n"], "r2": r2v,
                  "sign": "" if not np.isfinite(rv) else ("+" if rv > 0 else "-"),
                  "pearson_r": rv, "ci_lo": lo, "ci_hi": hi, "partial_r": last["partial_r"],
                  "partial_ci_lo": plo, "partial_ci_hi": phi,
                  "r2_all_snapshots": float(allp["r2"]), "n_all_snapshots": allp["n"],
                  "authors_r2": "" if a is None else a,
                  "authors_sign": "" if sign is None else {1: "+", -1: "-", 0: "none"}[sign],
                  "authors_source": "" if a is None else ANCHOR_SOURCE,
                  "verdict": point_verdict(k, r2v, rv), "ci_verdict": ci_verdict(sign, lo, hi),
                  "partial_verdict": ci_verdict(sign, plo, phi)})
  return out


def token_rows(model: str, z, piece=str, top: int = TOP_TOKENS) -> list[dict]:
  """collapse_tokens.csv: per-class CDNV and interference of the ``top`` most frequent
  analysed tokens of ``model`` (its per-class arrays ``z``) and of the average token."""
  ids, cdnv, itf = z["class_ids"], z["per_class_cdnv"], z["per_class_interference"]
  cnt = z["counts"][ids]
  rows = [{"model": model, "rank": rank, "token_id": int(ids[j]), "token": piece(int(ids[j])),
           "count": int(cnt[j]), "cdnv": float(cdnv[j]), "log10_cdnv": float(np.log10(cdnv[j])),
           "interference": float(itf[j])}
          for rank, j in enumerate(np.argsort(-cnt, kind="stable")[:top], 1)]
  return rows + [{"model": model, "rank": "average", "token_id": "",
                  "token": f"(mean over {ids.size} classes)", "count": float(cnt.mean()),
                  "cdnv": float(np.nanmean(cdnv)),
                  "log10_cdnv": float(np.nanmean(np.log10(cdnv))),
                  "interference": float(np.mean(itf))}]
