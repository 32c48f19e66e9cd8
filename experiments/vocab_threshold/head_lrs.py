"""The trained heads at each head learning rate, side by side (issue 33, item 3): one head lr
(1e-2) under-trains small ranks, so the protocol-(a) heads also run at 3e-2. Per V and head lr,
from ``runs.csv`` and ``vocab_threshold.csv`` only: the validation loss at every rank, and

    r*_lr = the smallest rank r with L_lr(r) ≤ L_lr(d) + tol_token

(the table's per-character tolerance, against the same lr's rank-d head), beside the r* of the
best lr per rank (the table's). An lr where small ranks are under-trained shows as a larger
r*_lr; the report names the lr that wins at each rank, and one generated sentence
(:func:`head_lr_reading`) says whether r*_lr is the same at every V for each lr (else:
undecided) and whether the lrs agree on its level."""

from __future__ import annotations

from . import tolerance


def head_lr_rows(runs: list, table: list) -> list[dict]:
  """One row per (V, head lr) of protocol (a): losses by rank, r*_lr, the ranks it wins."""
  out = []
  for t in table:
    v, d, tol = int(t["V"]), int(t["d_model"]), float(t["tol_token"])
    sel = [r for r in runs if int(r["V"]) == v and r["protocol"] == "a"
           and r["head"] == "lowrank"]
    lrs = sorted({float(r["lr"]) for r in sel})
    for lr in lrs:
      mine = {int(r["rank"]): float(r["eval_loss"]) for r in sel if float(r["lr"]) == lr}
      ranks = sorted(mine)
      ref = mine.get(d)
      rs = (None if ref is None else
            tolerance.r_star(ranks, [mine[r] for r in ranks], ref, tol))
      wins = [r for r in ranks if all(mine[r] <= float(x["eval_loss"]) for x in sel
                                      if int(x["rank"]) == r)]
      out.append({"V": v, "lr": lr, "losses": mine, "r_star": rs, "ref": ref, "wins": wins,
                  "n_lrs": len(lrs)})
  return out


def head_lr_section(runs: list, table: list) -> list[str]:
  """Markdown lines (empty with one head lr)."""
  rows = [r for r in head_lr_rows(runs, table) if r["n_lrs"] > 1]
  if not rows:
    return []
  ranks = sorted({k for r in rows for k in r["losses"]})
  lines = ["Protocol (a) heads at each head lr, side by side (validation loss; r\\*_lr against "
           "the same lr's rank-d head at the table's tolerance):", "",
           "| V | head lr | " + " | ".join(f"r={k}" for k in ranks) + " | r\\*_lr | best at |",
           "|---|---|" + "---|" * len(ranks) + "---|---|"]
  for r in rows:
    cells = " | ".join(f"{r['losses'][k]:.4f}" if k in r["losses"] else "–" for k in ranks)
    rs = "–" if r["r_star"] is None else str(r["r_star"])
    lines.append(f"| {r['V']} | {r['lr']:g} | {cells} | {rs} | "
                 f"{', '.join(map(str, r['wins'])) or 'none'} |")
  return lines + ["", head_lr_reading(rows)]


def head_lr_reading(rows: list[dict]) -> str:
  """One generated sentence: per head lr, is r*_lr the same at every V (flat), and do the head
  lrs agree on its level? (``rows`` from :func:`head_lr_rows`, more than one lr.)"""
  lrs = sorted({r["lr"] for r in rows})
  per = {lr: [r for r in sorted(rows, key=lambda r: r["V"]) if r["lr"] == lr] for lr in lrs}
  vs = ", ".join(str(r["V"]) for r in per[lrs[0]])
  parts, flat, levels = [], [], set()
  for lr in lrs:
    got = [r["r_star"] for r in per[lr]]
    same = None not in got and len(set(got)) == 1
    flat.append(same)
    levels.update(g for g in got if g is not None)
    parts.append(f"lr {lr:g}: " + ", ".join("–" if g is None else str(g) for g in got)
                 + (" (the same at every V)" if same else " (not the same at every V)"))
  text = f"r\\*_lr at V = {vs}, per head lr: " + "; ".join(parts) + ". "
  if all(flat):
    text += ("So a flat r\\*(V) is not the product of one head lr: it holds at every head lr "
             "run here (this corpus and trunk, V up to the largest above). ")
  else:
    bad = ", ".join(f"{lr:g}" for lr, f in zip(lrs, flat) if not f)
    text += (f"Whether r\\*(V) is flat depends on the head lr (not flat at lr {bad}): "
             "undecided on these runs. ")
  if len(levels) > 1:
    text += ("Its level does depend on the head lr: each r\\*_lr is measured against the same "
             "lr's rank-d head, and the lr that wins moves with the rank (last column), so the "
             "table's r\\* takes the best lr at each rank.")
  else:
    text += "The head lrs agree on its level."
  return text
