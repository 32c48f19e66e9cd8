"""The planted experiment's decisions, computed from its CSVs.

Part 1: the knee = the smallest head rank r whose expected loss is within ``tol`` of H, and the
checks: knee = k + 1 ± 1; every r ≥ k + 1 within ``tol`` of H; every r ≤ k/2 above H by at least
floor(r) − H − ``margin``.

Part 2, per arm (one head at one shape, several init seeds and lrs): the gaps g_s =
expected_loss_s − H over seeds at each lr, their mean and spread (max − min); the arm is taken
at the lr of the smallest mean gap on the selection stream (``sel_gap``, an independent sample
of the language) when the rows have it, else of the reported stream. MoS against the
parameter-matched lowrank arm: ``verdict`` (MoS − H ≤ ``MOS_TOL``; lowrank at or above its
exact floor gap; margin > 5 × spread), and in (language, objective) cells the Welch interval of
(lowrank − MoS) over seeds (``sbjax.studies.welch``).
"""

from __future__ import annotations

import math

from sbjax.studies.floor import knee
from sbjax.studies.welch import welch

MOS_TOL = 0.03
FLOOR_TOL = 1e-4
SPREAD_FACTOR = 5.0


def knee_checks(rows: list[dict], k: int, tol: float, margin: float) -> dict:
  h, ranks = rows[0]["H"], [int(r["rank"]) for r in rows]
  kn = knee(ranks, [r["expected_loss"] for r in rows], h, tol)
  high = [r for r in rows if r["rank"] >= k + 1]
  low = [r for r in rows if r["rank"] <= k / 2]
  return {"k": k, "H": h, "tol": tol, "margin": margin, "knee": kn,
          "knee_sampled": knee(ranks, [r["eval_loss"] for r in rows], h, tol),
          "knee_ok": kn is not None and abs(kn - (k + 1)) <= 1,
          "high_ok": bool(high) and all(r["gap"] <= tol for r in high),
          "high_max_gap": max((r["gap"] for r in high), default=math.nan),
          "low_ok": bool(low) and all(r["gap"] >= r["floor_gap"] - margin for r in low),
          "low_min_excess": min((r["gap"] - r["floor_gap"] for r in low), default=math.nan),
          "below_floor": [int(r["rank"]) for r in rows
                          if r["expected_loss"] < r["floor"] - FLOOR_TOL]}


def _by_arm_lr(rows) -> dict:
  """{(arm, lr): gaps, seeds, mean, spread, sel_mean} in order of first appearance."""
  out: dict = {}
  for r in rows:
    rec = out.setdefault((str(r["arm"]), float(r["lr"])), {
        "arm": str(r["arm"]), "head": r["head"], "rank": int(r["rank"]), "lr": float(r["lr"]),
        "head_params": int(r["head_params"]), "floor_gap": float(r["floor_gap"]),
        "gaps": [], "sel_gaps": []})
    rec["gaps"].append(float(r["gap"]))
    if "sel_gap" in r:
      rec["sel_gaps"].append(float(r["sel_gap"]))
  for rec in out.values():
    g, sg = rec["gaps"], rec["sel_gaps"]
    rec.update(n=len(g), mean=sum(g) / len(g), spread=max(g) - min(g),
               sel_mean=sum(sg) / len(sg) if sg else math.nan)
  return out


def arms(rows) -> list[dict]:
  """One record per arm at its selected lr (module doc), ``by_lr``: mean gap at every lr."""
  best: dict = {}
  for rec in _by_arm_lr(rows).values():
    key = "mean" if math.isnan(rec["sel_mean"]) else "sel_mean"
    cur = best.get(rec["arm"])
    by_lr = {**(cur["by_lr"] if cur else {}), rec["lr"]: rec["mean"]}
    best[rec["arm"]] = {**(rec if cur is None or rec[key] < cur[key] else cur), "by_lr": by_lr,
                        "selected_on": "reported" if key == "mean" else "selection"}
  return list(best.values())


def verdict(rows) -> dict | None:
  """MoS against the best lowrank arm of at most 1.05x its head parameters; None without both."""
  a = arms(rows)
  mos = next((x for x in a if x["head"] == "mos"), None)
  matched = [x for x in a if mos and x["head"] == "lowrank"
             and x["head_params"] <= 1.05 * mos["head_params"]]
  if not matched:
    return None
  low = min(matched, key=lambda x: x["mean"])
  spread, margin, n = max(mos["spread"], low["spread"]), low["mean"] - mos["mean"], min(
      mos["n"], low["n"])
  return {"mos_arm": mos["arm"], "lowrank_arm": low["arm"], "seeds": n, "mos_gap": mos["mean"],
          "lowrank_gap": low["mean"], "lowrank_floor_gap": low["floor_gap"], "margin": margin,
          "spread": spread, "mos_beats": margin > 0, "mos_within_tol": mos["mean"] <= MOS_TOL,
          "lowrank_at_or_above_floor": (math.isfinite(low["floor_gap"])
                                        and min(low["gaps"]) >= low["floor_gap"] - FLOOR_TOL),
          "margin_over_5_spread": n >= 2 and margin > SPREAD_FACTOR * spread}


def cells(rows) -> list[tuple]:
  """[((lang, objective), rows)] in order of first appearance (rows with a ``lang`` column)."""
  out: dict = {}
  for r in rows:
    out.setdefault((str(r["lang"]), str(r["objective"])), []).append(r)
  return list(out.items())


def cell_summary(rows) -> dict:
  """One cell's arms by run label and its comparisons: ``params`` (mos vs the matched lowrank)
  and ``flops`` (mos-flops vs the same lowrank), Welch over the seeds' gaps at the selected lrs."""
  run_of = {str(r["arm"]): str(r["run"]) for r in rows}
  by = {run_of[a["arm"]]: a for a in arms(rows)}
  low = by.get("lowrank")

  def vs(run):
    return None if run not in by or low is None else welch(by[run]["gaps"], low["gaps"])
  return {"arms": by, "params": vs("mos"), "flops": vs("mos-flops")}


def mix_summary(rows) -> dict | None:
  """``verdict`` of the plain part 2, or each cell's comparisons' verdicts."""
  if rows and "lang" in rows[0]:
    return {f"{lang}/{obj}": {k: (w["verdict"] if w else None)
                              for k, w in cell_summary(rs).items() if k != "arms"}
            for (lang, obj), rs in cells(rows)}
  return verdict(rows) if rows else None
