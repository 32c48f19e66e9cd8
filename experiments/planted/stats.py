"""The planted experiment's decisions, computed from its CSVs: the knee checks (part 1); per
arm the gaps g_s = expected_loss_s − H over seeds at each lr, the arm taken at the lr of the
smallest mean gap on the selection stream (``sel_gap``) when the rows have it, else on the
reported one; MoS against the parameter-matched lowrank arm (``verdict``, or per (language,
objective) cell Welch intervals, ``sbjax.studies.welch``, with no verdict when an arm chose
its lr on those seeds); the fresh seeds' intervals and the pre-registered rule's ``decide``.
"""

from __future__ import annotations

import dataclasses
import math

from sbjax.studies.floor import knee
from sbjax.studies.welch import welch

from ..common import best_lr, mean

MOS_TOL = 0.03
FLOOR_TOL = 1e-4
SPREAD_FACTOR = 5.0


def knee_checks(rows: list[dict], k: int, tol: float, margin: float) -> dict:
  """The knee (the smallest r with expected loss − H ≤ ``tol``) and its checks: knee = k + 1 ±
  1; every r ≥ k + 1 within ``tol``; every r ≤ k/2 above H by at least floor(r) − H − margin."""
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
    rec.update(n=len(g), mean=mean(g), spread=max(g) - min(g),
               sel_mean=mean(sg) if sg else math.nan)
  return out


def arms(rows) -> list[dict]:
  """One record per arm at its selected lr (``best_lr`` of the mean selection-stream gaps, or
  of the reported ones without a selection stream), ``by_lr``: mean gap at every lr."""
  by_arm: dict = {}
  for rec in _by_arm_lr(rows).values():
    by_arm.setdefault(rec["arm"], []).append(rec)
  out = []
  for recs in by_arm.values():
    on = "selection" if all(r["sel_gaps"] for r in recs) else "reported"
    lr = best_lr({r["lr"]: r["sel_mean" if on == "selection" else "mean"] for r in recs})
    out.append({**next(r for r in recs if r["lr"] == lr), "selected_on": on,
                "by_lr": {r["lr"]: r["mean"] for r in recs}})
  return out


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
  and ``flops`` (mos-flops vs the same lowrank), Welch over the seeds' gaps at the selected lrs;
  each arm's ``below_floor``: how many of its gaps lie below the lowrank arm's exact floor gap."""
  run_of = {str(r["arm"]): str(r["run"]) for r in rows}
  by = {run_of[a["arm"]]: a for a in arms(rows)}
  low = by.get("lowrank")
  for a in by.values():
    a["below_floor"] = sum(g < low["floor_gap"] for g in a["gaps"]) if low else 0

  def vs(run):
    return None if run not in by or low is None else welch(by[run]["gaps"], low["gaps"])
  return {"arms": by, "params": vs("mos"), "flops": vs("mos-flops")}


# the verdict of a comparison whose lrs were chosen on the seeds it is reported on
SAME_SEEDS = "undecided (the lr was chosen on these seeds)"


def mix_summary(rows) -> dict | None:
  """``verdict`` of the plain part 2, or each cell's comparisons' verdicts: ``SAME_SEEDS``
  when an arm chose its lr among several on these very seeds."""
  if rows and "lang" in rows[0]:
    out = {}
    for (lang, obj), rs in cells(rows):
      c = cell_summary(rs)
      chosen = any(len(a["by_lr"]) > 1 for a in c["arms"].values())
      out[f"{lang}/{obj}"] = {k: None if w is None else SAME_SEEDS if chosen else w["verdict"]
                              for k, w in c.items() if k != "arms"}
    return out
  return verdict(rows) if rows else None


def decide(rule, mos_gaps: list, floor_gap: float, floor_of_gaps: list) -> dict:
  """The verdict of ``rule`` (``presets.FreshRule``) with its reason: ``mos_gaps`` the fresh
  runs' gaps of ``rule.mos``, ``floor_gap`` the exact floor gap of ``rule.floor_of``'s rank
  (the floor fit's), ``floor_of_gaps`` the gaps of every ``rule.floor_of`` run."""
  n, below = len(mos_gaps), sum(g < floor_gap for g in mos_gaps)
  lowest = min(floor_of_gaps, default=math.nan)
  out = {"n": n, "below": below, "floor_gap": floor_gap, "mos_max_gap": max(mos_gaps,
                                                                             default=math.nan)}
  if n < rule.n_fresh or not math.isfinite(floor_gap):
    return {**out, "verdict": "undecided", "reason": f"{n} fresh {rule.mos} runs and floor gap "
            f"{floor_gap:.4f}: the rule needs {rule.n_fresh} runs and a finite floor"}
  if lowest < floor_gap - rule.floor_tol:
    return {**out, "verdict": "undecided", "reason": f"a {rule.floor_of} run ended at "
            f"{lowest:.4f}, below the fitted floor gap {floor_gap:.4f} by more than "
            f"{rule.floor_tol:g}: the floor fit is not the minimum"}
  what = f"{rule.mos} − H below the {rule.floor_of} arm's exact floor gap {floor_gap:.4f} on " \
         f"{below} of {n} fresh seeds (largest {out['mos_max_gap']:.4f})"
  v = "supports" if below == n else "refutes" if below == 0 else "undecided"
  return {**out, "verdict": v, "reason": what}


def rule_text(rule: dict) -> str:
  """The rule (``presets.FreshRule`` as a dict) in words, for the report."""
  return (f"in cell {rule['cell']}, on the fresh seeds, each arm at the lr it chose on the "
          f"selection seeds: every {rule['mos']} run below the exact floor gap of the "
          f"{rule['floor_of']} arm's rank: supports; none: refutes; some, fewer than "
          f"{rule['n_fresh']} fresh runs, or a {rule['floor_of']} run more than "
          f"{rule['floor_tol']:g} below the fitted floor: undecided.")


def fresh_summary(rule, mix_rows: list, fresh_rows: list) -> dict:
  """The fresh seeds' Welch comparisons per cell (``cell_summary``) and ``rule``'s decision on
  its cell; the floor gap and the lowrank runs of that cell come from both tables."""
  comps = {f"{lang}/{obj}": {k: v for k, v in cell_summary(rs).items() if k != "arms"}
           for (lang, obj), rs in cells(fresh_rows)}

  def of(rs, run):
    return [r for r in rs if f"{r['lang']}/{r['objective']}" == rule.cell and r["run"] == run]
  low = of(mix_rows + fresh_rows, rule.floor_of)
  floor = float(low[0]["floor_gap"]) if low else math.nan
  mos = [float(r["gap"]) for r in of(fresh_rows, rule.mos)]
  low = [float(r["gap"]) for r in low]
  return {"cells": comps, "rule": dataclasses.asdict(rule),
          "decision": decide(rule, mos, floor, low)}
