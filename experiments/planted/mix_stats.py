"""Part 2's statistics over seeds: per arm (a head at one shape, several init seeds) the mean
gap to H and the seed spread, and the verdict MoS vs the parameter-matched lowrank head.

For arm a at learning rate η with gaps g_s = expected_loss_s − H over seeds s:
    mean_{a,η} = Σ_s g_s / n,   spread_{a,η} = max_s g_s − min_s g_s   (0 with one seed),
and the arm is taken at its best η: the smallest mean of the selection stream's gaps
(``sel_gap``, an independent sample of the language) when the rows have them, else the
smallest mean itself (one η when the preset has no grid); mean and spread are then those of
the reported (validation) stream at that η.
The comparison of the first mos arm with every lowrank arm of at most 1.05× its head parameters:
    margin = mean_lowrank − mean_mos,   spread = max(spread_mos, spread_lowrank),
and the issue's criteria: MoS − H ≤ ``mos_tol`` (0.03), matched lowrank − H ≥ its exact floor
gap (− ``floor_tol`` 1e-4 for numerical ties), margin > 5 × spread (needs ≥ 2 seeds).
"""

from __future__ import annotations

import math

MOS_TOL = 0.03
FLOOR_TOL = 1e-4
SPREAD_FACTOR = 5.0


def _lr(r) -> float:
  v = r.get("lr", "")
  return float(v) if v not in ("", None) else float("nan")


def _group(rows) -> dict:
  """{(arm, lr): record with gaps, seeds, n, mean, spread} in order of first appearance."""
  out: dict = {}
  for r in rows:
    a = str(r.get("arm", r["label"]))
    lr = _lr(r)
    rec = out.setdefault((a, "nan" if math.isnan(lr) else lr), {
        "arm": a, "head": r["head"], "rank": int(r["rank"]), "lr": lr,
        "head_params": int(r["head_params"]), "floor_gap": float(r["floor_gap"]),
        "gaps": [], "seeds": []})
    rec["gaps"].append(float(r["gap"]))
    rec["seeds"].append(int(r.get("seed", 0)))
    if r.get("sel_gap", "") not in ("", None):
      rec.setdefault("sel_gaps", []).append(float(r["sel_gap"]))
  for rec in out.values():
    g = rec["gaps"]
    rec["n"] = len(g)
    rec["mean"] = sum(g) / len(g)
    rec["spread"] = max(g) - min(g)
    sg = rec.get("sel_gaps")
    rec["sel_mean"] = sum(sg) / len(sg) if sg else float("nan")
  return out


def arms(rows) -> list[dict]:
  """One record per arm, in the order of first appearance (rows from planted_mix.csv), at
  the arm's best learning rate (``by_lr`` maps every lr of the arm to its mean gap). With a
  selection stream (``sel_gap``) the lr is the one of the smallest mean selection gap
  (``selected_on`` "selection"; ``sel_by_lr`` maps lr to it) and the reported stream only
  reports; without one it is chosen on the measurement it reports (``selected_on``
  "reported": optimistic by at most the seed-level noise, for every arm alike)."""
  best: dict = {}
  for rec in _group(rows).values():
    cur = best.get(rec["arm"])
    by_lr = (cur["by_lr"] if cur else {})
    sel_by = (cur["sel_by_lr"] if cur else {})
    by_lr[rec["lr"]] = rec["mean"]
    sel_by[rec["lr"]] = rec["sel_mean"]
    rec["selected_on"] = "reported" if math.isnan(rec["sel_mean"]) else "selection"
    key = "mean" if rec["selected_on"] == "reported" else "sel_mean"
    if cur is None or rec[key] < cur[key]:
      cur = rec
    cur["sel_by_lr"] = sel_by
    cur["by_lr"] = by_lr
    best[rec["arm"]] = cur
  return list(best.values())


def verdict(rows, mos_tol: float = MOS_TOL) -> dict | None:
  """The MoS vs matched-lowrank verdict of the module docstring; None without both arms."""
  a = arms(rows)
  mos = next((x for x in a if x["head"] == "mos"), None)
  if mos is None:
    return None
  matched = [x for x in a if x["head"] == "lowrank"
             and x["head_params"] <= 1.05 * mos["head_params"]]
  if not matched:
    return None
  low = min(matched, key=lambda x: x["mean"])  # the best matched lowrank arm
  spread = max(mos["spread"], low["spread"])
  margin = low["mean"] - mos["mean"]
  n = min(mos["n"], low["n"])
  return {"mos_arm": mos["arm"], "lowrank_arm": low["arm"], "seeds": n,
          "mos_gap": mos["mean"], "lowrank_gap": low["mean"],
          "lowrank_floor_gap": low["floor_gap"], "margin": margin, "spread": spread,
          "mos_beats": margin > 0,
          "mos_within_tol": mos["mean"] <= mos_tol,
          "lowrank_at_or_above_floor": (math.isfinite(low["floor_gap"])
                                        and min(low["gaps"]) >= low["floor_gap"] - FLOOR_TOL),
          "margin_over_5_spread": n >= 2 and margin > SPREAD_FACTOR * spread}
