"""The collapse experiment's findings in plain words, computed from its tables (never written
by hand): which anchors agree with the authors, whether the bias-corrected norm CoV still
correlates with the loss, where counting snapshots as models flips a sign, and which metrics
the seed-only group supports; and, for the planted language, whether trained models approach
the ceiling.

Thresholds (stated in the text they produce): a correlation is "strong" when R² > 0.5 and
"negligible" when R² ≤ 0.3 (the verdict's bound for the authors' "no relation" anchors); a
seed-group correlation (one shape, only the seed differs) differs from 0 when its 95% Fisher-z
interval excludes 0 (the permutation p is printed beside it). Every correlation of
``interval_sentence`` and ``seed_sentence`` carries its 95% Fisher-z interval; a claim is
supported, refuted or undecided by the interval (an interval that spans 0 is undecided).
"""

from __future__ import annotations

import math

from sbjax.studies import stats

STRONG, NEGLIGIBLE = 0.5, 0.3
# the "no relation" anchors (the authors' R² ≈ 0.08) against an interval: a relation is
# negligible when |r| < sqrt(NEGLIGIBLE), the bound of the point verdict (R² ≤ 0.3)
NO_RELATION_R = math.sqrt(NEGLIGIBLE)


def _num(v) -> float:
  try:
    return float(v)
  except (TypeError, ValueError):
    return math.nan


def _sign(v) -> str:
  """A sign cell ('+' / '-'); '–' when empty (CSV read-back gives NaN for '')."""
  return v if isinstance(v, str) and v else "–"


def _by(rows: list[dict], *keys) -> dict:
  return {tuple(int(r[k]) if k == "min_count" else r[k] for k in keys): r for r in rows}


def strength(r2: float) -> str:
  if not math.isfinite(r2):
    return "undefined"
  return "strong" if r2 > STRONG else ("negligible" if r2 <= NEGLIGIBLE else "moderate")


def anchor_sentence(an: list[dict], mcount: int) -> str:
  """'At min_count m (one point per run, n runs): agrees: ...; disagrees: ...; ...'."""
  groups: dict[str, list[str]] = {}
  sel = [r for r in an if int(r["min_count"]) == mcount]
  for r in sel:
    if r["verdict"] == "no reference value":
      continue
    key = r["verdict"].split(" (")[0]
    groups.setdefault(key, []).append(f"{r['metric']} (R² {_num(r['r2']):.2f}, "
                                      f"sign {_sign(r['sign'])})")
  n = int(_num(sel[0]["n_runs"])) if sel else 0
  body = "; ".join(f"{k}: " + ", ".join(v) for k, v in sorted(groups.items()))
  return f"At min_count {mcount} ({n} runs, one point per run) against the authors: {body}."


def ci_text(r, lo, hi) -> str:
  """'r +0.62 [+0.08, +0.88]' (the interval '–' when undefined)."""
  r, lo, hi = _num(r), _num(lo), _num(hi)
  iv = f"[{lo:+.2f}, {hi:+.2f}]" if math.isfinite(lo) and math.isfinite(hi) else "[–]"
  return f"r {r:+.2f} {iv}" if math.isfinite(r) else "r undefined"


def _verdict_groups(sel: list[dict], key: str, r: str, lo: str, hi: str) -> str:
  groups: dict[str, list[str]] = {}
  for row in sel:
    v = str(row.get(key, "undefined"))
    v = "undecided (no interval)" if v.startswith("undefined") else v
    groups.setdefault(v, []).append(f"{row['metric']} ({ci_text(row[r], row[lo], row[hi])})")
  order = ("supported", "refuted", "undecided", "undecided (no interval)", "r > 0", "r < 0",
           "sign undecided")
  keys = sorted(groups, key=lambda k: order.index(k) if k in order else len(order))
  return "; ".join(f"{k}: " + ", ".join(groups[k]) for k in keys)


def interval_sentence(an: list[dict], mcount: int) -> str:
  """The authors' claims judged by the 95% Fisher-z interval of r (one point per run), then
  by the partial r with log(parameters) partialled out (the verdict rule:
  ``tables.ci_verdict``; metrics without an authors' value get the sign of r only)."""
  sel = [r for r in an if int(r["min_count"]) == mcount and "ci_verdict" in r]
  if not sel:
    return ""
  n = int(_num(sel[0]["n_runs"])) if math.isfinite(_num(sel[0]["n_runs"])) else 0
  return (f"With 95% Fisher-z intervals of r over the {n} runs at min_count {mcount} (an "
          "interval that spans 0 is undecided; a 'no relation' claim is supported only inside "
          f"|r| < {NO_RELATION_R:.2f}): " + _verdict_groups(sel, "ci_verdict", "pearson_r",
                                                            "ci_lo", "ci_hi")
          + ". With log(parameters) partialled out (the runs differ in size as well as in "
          "loss; interval with one control): " + _verdict_groups(
              sel, "partial_verdict", "partial_r", "partial_ci_lo", "partial_ci_hi") + ".")


def sign_sentence(rows: list[dict]) -> str:
  """NC3's mean cosine over the runs (last snapshots) and what its sign means for UNC3's
  (the conventions: sbjax.metrics.neural_collapse, tests/unit/test_collapse_signs.py)."""
  v = [x for x in (_num(r.get("nc3_cos_mean")) for r in rows) if math.isfinite(x)]
  if not v:
    return ""
  m = sum(v) / len(v)
  side = ("positive: the head's rows point, on average, along their centred class means"
          if m > 0 else "negative: the head's rows point, on average, against their centred "
          "class means" if m < 0 else "zero")
  return (f"Sign conventions: NC3, UNC3 and GNC2 follow the authors' formulas (checked on "
          f"hand-derived examples). NC3's mean cosine over these {len(v)} runs is {m:+.3f} "
          f"(range {min(v):+.3f} to {max(v):+.3f}), {side}. UNC3 = std/mean takes the sign of "
          "that mean, so the sign of its correlation with the loss flips with the sign of "
          "NC3's mean at the same trend of |UNC3|; and NC3 itself changes under a common shift "
          "of the head's rows that changes no prediction (the softmax gauge), so its sign is "
          "not a property of the predictions alone.")


def norm_cov_sentence(an: list[dict], seeds: list[dict]) -> str:
  """Does the bias-corrected norm CoV still correlate with the loss? (the issue's question)"""
  by = _by(an, "min_count", "metric")
  sd: dict = {}  # (min_count, metric) -> [(group, row)], one per seed group
  for r in seeds:
    sd.setdefault((int(r["min_count"]), r["metric"]), []).append((r.get("group", ""), r))
  mcs = sorted({k[0] for k in by})
  parts, strong = [], []
  for m in mcs:
    raw, cor = by.get((m, "nc2_norm_cov")), by.get((m, "nc2_norm_cov_corrected"))
    if raw is None or cor is None:
      continue
    r2r, r2c = _num(raw["r2"]), _num(cor["r2"])
    s = (f"min_count {m}: raw R² {r2r:.2f} ({_sign(raw['sign'])}), corrected R² {r2c:.2f} "
         f"({_sign(cor['sign'])}, {strength(r2c)})")
    ps = sd.get((m, "nc2_norm_cov_corrected"), [])
    if ps:
      s += ", seed group p = " + ", ".join(f"{_num(r['p_perm']):.3f}" + (f" ({g})" if g else "")
                                           for g, r in ps)
    parts.append(s)
    strong.append(strength(r2c) == "strong")
  if not parts:
    return ""
  if all(strong):
    head = "The bias-corrected norm CoV still correlates strongly with the loss"
  elif any(strong):
    head = "The bias-corrected norm CoV correlates strongly at some min_count only"
  else:
    head = "The bias-corrected norm CoV no longer correlates strongly with the loss"
  return (f"{head} (strong: R² > {STRONG}; the authors' ≈ 0.08): " + "; ".join(parts) + ".")


def counting_sentence(r2: list[dict], metrics: tuple | None = None) -> str:
  """Metrics (of ``metrics``; None = all) whose sign of r differs between one point per run
  and all snapshots."""
  by = _by(r2, "min_count", "points", "metric")
  flips = []
  for (m, pts, k), r in sorted(by.items()):
    other = by.get((m, "all", k))
    if pts != "last" or other is None or (metrics is not None and k not in metrics):
      continue
    a, b = _num(r["pearson_r"]), _num(other["pearson_r"])
    if math.isfinite(a) and math.isfinite(b) and a * b < 0:
      flips.append(f"{k} at min_count {m} (r {a:+.2f} per run, {b:+.2f} over snapshots)")
  if not flips:
    return ("Counting every snapshot as a model changes no sign of r (it does change the "
            "R² values: both are in the table).")
  return "Counting every snapshot as a model flips the sign of r for " + "; ".join(flips) + "."


def seed_verdict(lo, hi) -> str:
  """The per-shape seed test: is r different from 0? By the 95% interval: 'r > 0' or
  'r < 0' when it excludes 0, 'not distinguishable from 0' when it contains 0."""
  c = stats.ci_sign(lo, hi)
  if not math.isfinite(c):
    return "undefined (no interval: too few seeds)"
  return {1.0: "r > 0", -1.0: "r < 0", 0.0: "not distinguishable from 0"}[c]


def _seed_group_text(gs: list[dict], metrics: tuple) -> tuple[str, int, int]:
  """One seed group's clause, and (intervals that exclude 0, intervals) over its tests."""
  n = max(int(_num(r["n"])) for r in gs if math.isfinite(_num(r["n"])))
  loss = (f", loss {_num(gs[0]['val_loss_mean']):.3f} ± {_num(gs[0]['val_loss_sd']):.3f} "
          "(mean ± SD)") if "val_loss_mean" in gs[0] else ""
  out, hits, tests = [], 0, 0
  for m in sorted({int(r["min_count"]) for r in gs}):
    sel = [r for r in gs if int(r["min_count"]) == m and r["metric"] in metrics]
    by: dict[str, list[str]] = {}
    for r in sel:
      v = seed_verdict(r.get("ci_lo"), r.get("ci_hi"))
      p = f", p {_num(r['p_perm']):.3f}" if math.isfinite(_num(r.get("p_perm"))) else ""
      ci = ci_text(r["pearson_r"], r.get("ci_lo"), r.get("ci_hi"))
      by.setdefault(v, []).append(f"{r['metric']} ({ci}{p})")
      hits += v in ("r > 0", "r < 0")
      tests += not v.startswith("undefined")
    ne0 = by.get("r > 0", []) + by.get("r < 0", [])
    rest = "; ".join(f"{k}: " + ", ".join(v) for k, v in by.items() if k not in ("r > 0", "r < 0"))
    out.append(f"min_count {m}: r ≠ 0 for " + (", ".join(ne0) if ne0 else "none")
               + (f"; {rest}" if rest else ""))
  return f"{gs[0].get('group', 'one shape')} ({n} seeds{loss}): " + "; ".join(out), hits, tests


def seed_sentence(seeds: list[dict], metrics: tuple) -> str:
  """Per seed-only group (one shape, only the data-order seed differs) and min_count: which
  of ``metrics`` correlate with the loss, r ≠ 0 by the 95% Fisher-z interval
  (``seed_verdict``; the permutation p beside), and how many intervals exclude 0 against
  the 1 in 20 expected by chance."""
  if not seeds:
    return ""
  names = list(dict.fromkeys(str(r.get("group", "one shape")) for r in seeds))
  clauses, hits, tests = [], 0, 0
  for g in names:
    c, h, t = _seed_group_text([r for r in seeds if str(r.get("group", "one shape")) == g],
                               metrics)
    clauses.append(c)
    hits, tests = hits + h, tests + t
  n = int(_num(seeds[0]["n"]))
  return (f"Among {n} data-order seeds of each of {len(names)} shape(s) (only the seed "
          "differs), is each metric's correlation with the loss different from 0 (95% "
          "Fisher-z interval of r; the permutation p beside)? " + ". ".join(clauses)
          + f". {hits} of {tests} intervals exclude 0, against about {tests / 20:.1f} expected "
          "by chance alone at 95% if no metric followed the loss among seeds (a rough count: "
          "the tests are not independent, e.g. a metric's raw and guarded or corrected forms).")


def ceiling_sentence(ceil: list[dict], trained: list[dict], metrics: tuple) -> str:
  """Per metric, whether the trained runs end nearer the ceiling than they started:
  'approach' (distance to the nearer canonical optimum shrinks by more than half), 'go past'
  (they end beyond both optima, on the far side from where they started), else 'stay far'."""
  if not ceil or not trained:
    return ""
  steps = sorted({int(r["step"]) for r in trained})
  first = [r for r in trained if int(r["step"]) == steps[0]]
  last = [r for r in trained if int(r["step"]) == steps[-1]]
  verdicts: dict[str, list[str]] = {}
  for k in metrics:
    cs = [_num(c[k]) for c in ceil]
    lo, hi = min(cs), max(cs)
    x0 = sum(_num(r[k]) for r in first) / len(first)
    x1 = sum(_num(r[k]) for r in last) / len(last)
    d0 = 0.0 if lo <= x0 <= hi else min(abs(x0 - lo), abs(x0 - hi))
    d1 = 0.0 if lo <= x1 <= hi else min(abs(x1 - lo), abs(x1 - hi))
    if not (math.isfinite(x0) and math.isfinite(x1)):
      v = "undefined"
    elif (x0 < lo and x1 > hi) or (x0 > hi and x1 < lo):
      v = "go past the optimum"
    elif d1 <= 0.5 * d0:
      v = "approach the optimum"
    else:
      v = "stay far from the optimum"
    verdicts.setdefault(v, []).append(f"{k} ({x0:.3g} → {x1:.3g}; optimum {lo:.3g}–{hi:.3g})")
  gap0 = sum(_num(r["gap"]) for r in first) / len(first)
  gap1 = sum(_num(r["gap"]) for r in last) / len(last)
  return (f"As the gap to H falls {gap0:.3g} → {gap1:.3g} nats (steps {steps[0]} → {steps[-1]}, "
          "mean over runs), the metrics " + "; ".join(
              f"{v}: " + ", ".join(ks) for v, ks in sorted(verdicts.items())) + ".")
