"""The tables of the collapse experiment, from collapse_models.csv: R², r with its 95%
Fisher-z interval and the partial r on log(parameters) per metric (one point per run, and all
snapshots, labelled as such) at every min_count, the seed group's permutation p-values, the
like-for-like anchor table with the interval verdicts (supported / refuted / undecided) and
the token-level view."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .findings import NO_RELATION_R, seed_verdict
from .measure import ANCHOR_SOURCE, ANCHORS, METRICS, POINTS, TOP_TOKENS
from ..shared import load_np, read_rows, upath, write_rows
from sbjax.data.tokenizer import Tokenizer
from sbjax.studies import stats


def model_rows(out: Path, kind: str, min_count=None, points: str = "all") -> list[dict]:
  """The rows of collapse_models.csv of one kind (grid | seeds); with ``min_count`` only
  those measured at it; ``points="last"``: only each run's last snapshot."""
  rows = [r for r in read_rows(upath(out) / "collapse_models.csv") if r.get("kind") == kind]
  if min_count is not None:
    rows = [r for r in rows if int(r["min_count"]) == int(min_count)]
  if points == "last":
    rows = [r for r in rows if int(r["last_snapshot"]) == 1]
  return rows


def min_counts(out: Path) -> list[int]:
  return sorted({int(r["min_count"]) for r in read_rows(upath(out) / "collapse_models.csv")})


def column(rows, key) -> np.ndarray:
  return np.asarray([float(r.get(key, np.nan)) for r in rows], np.float64)


def log_params(rows: list[dict]) -> np.ndarray:
  """log(n_params) per row (NaN where the CSV has no parameter count)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.log(column(rows, "n_params"))


def r2_table(rows: list[dict], n_perm: int = 0) -> list[dict]:
  """Per metric: n, R², Pearson r with its 95% Fisher-z interval (ci_lo, ci_hi), the partial
  r with log(parameters) partialled out and its interval (partial_n, partial_r,
  partial_ci_lo, partial_ci_hi; NaN where every row has one size), and the permutation p,
  of the metric vs val_loss."""
  y, z = column(rows, "val_loss"), log_params(rows)
  out = []
  for i, k in enumerate(METRICS):
    x = column(rows, k)
    s = stats.correlation_summary(x, y, n_perm=n_perm, seed=i)
    ps = stats.partial_summary(x, y, z)
    a = ANCHORS.get(k, (None,))[0]
    out.append({"metric": k, **s, "partial_n": ps["n"],
                **{key: v for key, v in ps.items() if key != "n"},
                "paper_r2": "" if a is None else a})
  return out


def r2_rows(out: Path) -> list[dict]:
  """collapse_r2.csv: the grid's R² table at every (min_count, points) selection."""
  rows = []
  for mcount in min_counts(out):
    for pts in POINTS:
      sel = model_rows(out, "grid", mcount, pts)
      rows += [{"min_count": mcount, "points": pts, **r} for r in r2_table(sel)]
  return rows


def seed_groups(out: Path) -> list[str]:
  """The seed-only groups of collapse_models.csv (one per shape), in the order they ran."""
  return list(dict.fromkeys(r["group"] for r in model_rows(out, "seeds")))


def seed_rows(out: Path, n_perm: int) -> list[dict]:
  """collapse_seeds.csv: per seed-only group (one shape, only the data-order seed differs;
  last snapshot) and min_count, every metric's r with its 95% Fisher-z interval, the verdict
  of "r ≠ 0" (``seed_verdict``), the permutation p, and the loss's mean and SD over seeds."""
  rows = []
  for g in seed_groups(out):
    for mcount in min_counts(out):
      sel = [r for r in model_rows(out, "seeds", mcount, "last") if r["group"] == g]
      if len(sel) < 3:
        continue
      loss = column(sel, "val_loss")
      head = {"group": g, "n_layers": int(sel[0]["n_layers"]), "d_model": int(sel[0]["d_model"]),
              "min_count": mcount, "val_loss_mean": float(np.nanmean(loss)),
              "val_loss_sd": float(np.nanstd(loss, ddof=1))}
      rows += [{**head, **r, "ci_verdict": seed_verdict(r["ci_lo"], r["ci_hi"])}
               for r in r2_table(sel, n_perm=n_perm)]
  return rows


def verdict(metric: str, r2: float, r: float) -> str:
  """Our R² and sign against the authors' (ANCHORS)."""
  anchor, sign, _ = ANCHORS[metric]
  if anchor is None:
    return "no reference value"
  if not np.isfinite(r2):
    return "undefined here"
  if sign == 0:
    return "agrees (no relation)" if r2 <= 0.3 else f"disagrees (R² {r2:.2f} is not negligible)"
  if np.sign(r) != sign:
    return "disagrees (opposite sign)"
  if r2 >= anchor - 0.25:
    return "agrees"
  return "same sign, weaker"




def ci_verdict(sign, lo, hi) -> str:
  """The authors' claim against our 95% interval of r: with a sign (+1/-1) it is supported
  when the interval excludes 0 on that side, refuted when it excludes 0 on the other side,
  undecided when it spans 0; a "no relation" claim (sign 0) is supported when the interval
  lies inside ±NO_RELATION_R, refuted when it lies outside it, else undecided; no claim
  (None): the sign of r alone ("r > 0", "r < 0", "sign undecided")."""
  c = stats.ci_sign(lo, hi)
  if not np.isfinite(c):
    return "undefined (no interval: too few runs or one size)"
  if sign is None:
    return {1.0: "r > 0", -1.0: "r < 0", 0.0: "sign undecided"}[c]
  if sign == 0:
    b = NO_RELATION_R
    if -b < float(lo) and float(hi) < b:
      return "supported"
    return "refuted" if (float(lo) >= b or float(hi) <= -b) else "undecided"
  return "undecided" if c == 0 else ("supported" if c == sign else "refuted")


def anchor_rows(r2: list[dict]) -> list[dict]:
  """collapse_anchors.csv: per anchor metric and min_count, ours (one point per run, with the
  95% interval of r and the partial r on log(parameters); the all-snapshot R² beside it)
  against the authors' value, the point verdict and the interval verdicts."""
  by = {(int(r["min_count"]), r["points"], r["metric"]): r for r in r2}
  out = []
  for mcount in sorted({k[0] for k in by}):
    for k, (a, sign, what) in ANCHORS.items():
      last, allp = by[(mcount, "last", k)], by[(mcount, "all", k)]
      r2v, rv = float(last["r2"]), float(last["pearson_r"])
      lo, hi = float(last.get("ci_lo", np.nan)), float(last.get("ci_hi", np.nan))
      plo, phi = (float(last.get(c, np.nan)) for c in ("partial_ci_lo", "partial_ci_hi"))
      out.append({"metric": k, "what": what, "min_count": mcount, "n_runs": last["n"],
                  "r2": r2v, "sign": "" if not np.isfinite(rv) else ("+" if rv > 0 else "-"),
                  "pearson_r": rv, "ci_lo": lo, "ci_hi": hi,
                  "partial_r": float(last.get("partial_r", np.nan)), "partial_ci_lo": plo,
                  "partial_ci_hi": phi,
                  "r2_all_snapshots": float(allp["r2"]), "n_all_snapshots": allp["n"],
                  "authors_r2": "" if a is None else a,
                  "authors_sign": "" if sign is None else {1: "+", -1: "-", 0: "none"}[sign],
                  "authors_source": "" if a is None else ANCHOR_SOURCE,
                  "verdict": verdict(k, r2v, rv), "ci_verdict": ci_verdict(sign, lo, hi),
                  "partial_verdict": ci_verdict(sign, plo, phi)})
  return out


def _piece(out: Path, meta: dict):
  """Token id -> its piece with the experiment's tokenizer (the id itself without one)."""
  tok = meta.get("tokenizer")
  if tok:
    tp = Path(tok) if Path(tok).is_absolute() else upath(out) / tok
    if tp.exists():
      return Tokenizer(tp).id_to_piece
  return str


def token_table(out: Path, top: int = TOP_TOKENS) -> list[dict]:
  """Table 5: per-class CDNV and interference of the most frequent tokens of the grid's
  best model (lowest val loss; its smallest min_count; a preset without a grid: the seed
  group's) vs the average analysed token."""
  mc = min_counts(out)[0]
  ok = [r for r in (model_rows(out, "grid", mc) or model_rows(out, "seeds", mc, "last"))
        if math.isfinite(r["val_loss"]) and math.isfinite(r.get("nc1_mean_log10_cdnv", math.nan))]
  best = min(ok, key=lambda r: r["val_loss"])
  z = load_np(upath(out) / "perclass" / f"{best['model']}.npz")
  ids, cdnv, itf = z["class_ids"], z["per_class_cdnv"], z["per_class_interference"]
  cnt = z["counts"][ids]
  piece = _piece(out, json.loads((upath(out) / "collapse_meta.json").read_text()))
  rows = []
  for rank, j in enumerate(np.argsort(-cnt, kind="stable")[:top], 1):
    rows.append({"model": best["model"], "rank": rank, "token_id": int(ids[j]),
                 "token": piece(int(ids[j])), "count": int(cnt[j]), "cdnv": float(cdnv[j]),
                 "log10_cdnv": float(np.log10(cdnv[j])), "interference": float(itf[j])})
  rows.append({"model": best["model"], "rank": "average", "token_id": "", "token": "(mean over "
               f"{ids.size} classes)", "count": float(cnt.mean()),
               "cdnv": float(np.nanmean(cdnv)), "log10_cdnv": float(np.nanmean(np.log10(cdnv))),
               "interference": float(np.mean(itf))})
  return rows


def write_tables(out: Path, n_perm: int) -> None:
  """collapse_r2.csv (grid: every min_count, one point per run and all snapshots),
  collapse_seeds.csv (seed group, with permutation p-values), collapse_anchors.csv (the
  like-for-like comparison with the authors) and collapse_tokens.csv (the best grid model's
  most frequent tokens)."""
  out = upath(out)
  r2 = r2_rows(out)
  write_rows(out / "collapse_r2.csv", r2)
  seeds = seed_rows(out, n_perm)
  if seeds:
    write_rows(out / "collapse_seeds.csv", seeds)
  write_rows(out / "collapse_anchors.csv", anchor_rows(r2))
  write_rows(out / "collapse_tokens.csv", token_table(out))
