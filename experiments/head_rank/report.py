"""The head-rank report: the best-LR losses per protocol, the monotonicity check, the Fig. 6
analogue and the markdown section, read only from OUT/head_rank.csv."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from ..shared import fmt, finish_figure, upath  # noqa: E402
from sbjax.studies import rank_sweep as rs  # noqa: E402

NAME = "head_rank"
FIGURE = "fig_head_rank.png"
SUMMARY = "summary.json"
PAPER = ("Godey et al. (2024, Fig. 6) train rank-r heads on frozen Pythia-410m trunks (d=1024): "
         "validation loss falls smoothly in log r (r=32: 4.05, 64: 3.53, 128: 3.15, 256: 2.90, "
         "512: 2.77, 1024: 2.69) with no sharp knee.")


def summarize(out: Path) -> dict:
  """Best-LR losses per protocol and the monotonicity check of (b) (run writes it to
  ``summary.json``)."""
  rows = rs.read_rows(out)
  res: dict = {}
  for p in ("a", "b"):
    best = rs.best_rows(rows, p)
    if not best:
      continue
    ranks = [int(r["rank"]) for r in best]
    losses = [float(r["eval_loss"]) for r in best]
    run_ = rs.longest_non_increasing(ranks, losses)
    res[p] = {"ranks": ranks, "eval_loss": losses, "eval_acc": [float(r["eval_acc"]) for r in best],
              "non_increasing": rs.non_increasing(losses), "longest_non_increasing": run_,
              "n_non_increasing": len(run_),
              "inversions": int(sum(y > x for x, y in zip(losses, losses[1:])))}
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])]
  if full:
    res["full"] = {"eval_loss": float(full[0]["eval_loss"]), "eval_acc": float(full[0]["eval_acc"]),
                   "lr": float(full[0]["lr"]), "run": full[0]["run"]}
  if "b" in res:
    res["check_b_non_increasing_6_ranks"] = res["b"]["n_non_increasing"] >= 6
  return res


def draw(out: Path) -> Path:
  """The Fig. 6 analogue: best-LR validation loss and top-1 accuracy vs r, (a) and (b)."""
  rows = rs.read_rows(out)
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  style = {"a": ("o-", "C0", "(a) frozen trunk"), "b": ("s-", "C1", "(b) from scratch")}
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])]
  for ax, key, label in ((axes[0], "eval_loss", "validation loss (nats)"),
                         (axes[1], "eval_acc", "top-1 accuracy")):
    for p, (marker, color, name) in style.items():
      best = rs.best_rows(rows, p)
      if best:
        ax.plot([r["rank"] for r in best], [r[key] for r in best], marker, color=color, label=name)
      for r in rs.best_rows(rows, p, head="mos"):
        ax.plot(r["matched_rank"], r[key], "*", ms=11, color=color, mec="k",
                label=f"{p}: mos m={int(r['n_mix'])} ({r['param_ratio']:.2f}x params of r="
                      f"{int(r['matched_rank'])})")
    if full:
      ax.axhline(full[0][key], color="k", ls="--", lw=1, label="dense head (full)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("head rank r")
    ax.set_ylabel(label)
  axes[0].legend(fontsize=7)
  return finish_figure(fig, upath(out) / FIGURE, "Head rank (Godey Fig. 6 analogue), best LR per rank", dpi=110)


def _f(x) -> str:
  return fmt(x, spec=".4f")


def _mos_lines(rows: list, by: dict) -> list[str]:
  mos = [r for r in rows if r["head"] == "mos" and int(r["best"])]
  if not mos:
    return []
  lines = ["", "| protocol | head | params | matched lowrank r | param ratio | val loss | "
           "lowrank(r) val loss |", "|---|---|---|---|---|---|---|"]
  for r in sorted(mos, key=lambda x: (x["protocol"], x["n_mix"])):
    ref = by.get(r["protocol"], {}).get(int(r["matched_rank"]), {})
    lines.append(f"| {r['protocol']} | mos m={int(r['n_mix'])} | {int(r['params'])} | "
                 f"{int(r['matched_rank'])} | {r['param_ratio']:.3f} | {_f(r['eval_loss'])} | "
                 f"{_f(ref.get('eval_loss'))} |")
  return lines


def _findings(s: dict) -> list[str]:
  found = []
  for p, name in (("a", "frozen trunk (a)"), ("b", "from scratch (b)")):
    if p not in s:
      continue
    x = s[p]
    found.append(f"{name}: loss {x['eval_loss'][0]:.3f} at r={x['ranks'][0]} and "
                 f"{x['eval_loss'][-1]:.3f} at r={x['ranks'][-1]}; non-increasing over "
                 f"{x['n_non_increasing']} of {len(x['ranks'])} ranks "
                 f"({'all' if x['non_increasing'] else 'not all'} consecutive pairs).")
  agree = all(s[p]["eval_loss"][-1] < s[p]["eval_loss"][0] and s[p]["inversions"] <= 1
              for p in ("a", "b") if p in s)
  check = s.get("check_b_non_increasing_6_ranks")
  return ["", PAPER, "", "sbjax here: " + " ".join(found),
          f"The issue's check, (b) non-increasing across at least 6 ranks: "
          f"{'passed' if check else 'failed'}.",
          f"Agreement with the paper's trend (loss falls as r grows, at most one inversion): "
          f"{'yes' if agree else 'no'}. Scale differs: the paper's d=1024 trunk is trained "
          "to convergence on the Pile, these are small models on a small corpus."]


def report_section(out: Path, rel: str) -> str:
  """Markdown: figure, best-LR table and the paper comparison, all read from OUT's CSV."""
  out = upath(out)
  rows = rs.read_rows(out)
  by = {p: {int(r["rank"]): r for r in rs.best_rows(rows, p)} for p in ("a", "b")}
  ranks = sorted(set(by["a"]) | set(by["b"]))
  lines = [f"## {NAME}", "", f"![head rank]({rel}/{FIGURE})", "",
           "| r | (a) val loss | (a) top-1 | (a) lr | (b) val loss | (b) top-1 | (b) lr |",
           "|---|---|---|---|---|---|---|"]
  for r in ranks:
    a, b = by["a"].get(r, {}), by["b"].get(r, {})
    lines.append(f"| {r} | {_f(a.get('eval_loss'))} | {_f(a.get('eval_acc'))} | "
                 f"{fmt(a.get('lr'), spec='g')} | {_f(b.get('eval_loss'))} | "
                 f"{_f(b.get('eval_acc'))} | {fmt(b.get('lr'), spec='g')} |")
  lines += _mos_lines(rows, by) + _findings(summarize(out))
  return "\n".join(lines) + "\n"
