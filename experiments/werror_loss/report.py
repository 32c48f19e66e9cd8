"""werror_loss's report: the figure (the W-error curve; loss vs W-error) and the markdown
section, read only from werror_loss.csv, werror_curve.csv and summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from ..shared import fmt, read_rows, finish_figure, upath  # noqa: E402
from .presets import THRESHOLD  # noqa: E402

NAME = "werror_loss"
FIGURE = "fig_werror_loss.png"
CSV = "werror_loss.csv"
CURVE_CSV = "werror_curve.csv"
SUMMARY = "summary.json"
PAPER = ("Godey et al. (2024, Fig. 8): for Pythia-1B the loss rises once the W-error of the "
         "model's own head passes about 0.6.")


def _curve_panel(ax, curve: list, threshold: float) -> None:
  ax.plot([c["d"] for c in curve[1:]], [c["w_error"] for c in curve[1:]], "-", color="k")
  ax.axhline(threshold, color="r", ls=":", label=f"W-error = {threshold}")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("rank d of the approximation")
  ax.set_ylabel("W-error(d) of the full-rank head")
  ax.legend(fontsize=8)


def _loss_panel(ax, rows: list, threshold: float) -> None:
  full = [r for r in rows if r["protocol"] == "full"][0]
  for p, marker, name in (("a", "o-", "(a) frozen trunk"), ("b", "s-", "(b) from scratch")):
    sel = sorted((r for r in rows if r["protocol"] == p), key=lambda r: r["rank"])
    if not sel:
      continue
    ax.plot([r["w_error"] for r in sel], [r["eval_loss"] for r in sel], marker, label=name)
    for r in sel:
      ax.annotate(f"r={int(r['rank'])}", (r["w_error"], r["eval_loss"]), fontsize=6,
                  xytext=(3, 3), textcoords="offset points")
  ax.axhline(full["eval_loss"], color="k", ls="--", lw=1, label="dense head")
  ax.axvline(threshold, color="r", ls=":", label="0.6 (Godey Fig. 8)")
  ax.set_xlabel("W-error(r) of the full-rank head")
  ax.set_ylabel("validation loss of the rank-r run (nats)")
  ax.legend(fontsize=7)


def draw(out: Path) -> Path:
  out = upath(out)
  threshold = _summary(out).get("threshold", THRESHOLD)
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  _curve_panel(axes[0], read_rows(out / CURVE_CSV), threshold)
  _loss_panel(axes[1], read_rows(out / CSV), threshold)
  return finish_figure(fig, out / FIGURE, "Loss vs W-error (Godey Fig. 8 analogue)", dpi=110)


def _summary(out: Path) -> dict:
  return json.loads((upath(out) / SUMMARY).read_text())


def _f(x, nd=3) -> str:
  return fmt(x, spec=f".{nd}f")


def _findings(s: dict) -> tuple[list, list]:
  tol, threshold = s["tol"], s.get("threshold", THRESHOLD)
  found = [f"The full-rank head reaches W-error <= {threshold} at rank "
           f"{s['rank_at_werror_0.6']} of {s['n_sigma']}."]
  verdicts = []
  for p, name in (("a", "frozen trunk (a)"), ("b", "from scratch (b)")):
    if p not in s:
      continue
    x = s[p]
    if x["r_star"] is None:
      found.append(f"{name}: no rank comes within {100 * tol:.0f}% of the full-rank loss.")
      verdicts.append(False)
      continue
    minus = (f"the next smaller rank r={x['r_minus']} has W-error {_f(x['w_error_r_minus'])}"
             if x["r_minus"] is not None else "no smaller rank was trained")
    found.append(f"{name}: the smallest rank within {100 * tol:.0f}% of the full-rank loss is "
                 f"r*={x['r_star']} (W-error {_f(x['w_error_r_star'])}); {minus}.")
    verdicts.append(x["consistent_with_0.6"])
  return found, verdicts


def report_section(out: Path, rel: str) -> str:
  out = upath(out)
  rows = read_rows(out / CSV)
  found, verdicts = _findings(_summary(out))
  lines = [f"## {NAME}", "", f"![loss vs W-error]({rel}/{FIGURE})", "",
           "| protocol | r | W-error(r) | val loss | loss / full - 1 |", "|---|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: (r["protocol"], r["rank"])):
    lines.append(f"| {r['protocol']} | {int(r['rank'])} | {_f(r['w_error'])} | "
                 f"{_f(r['eval_loss'], 4)} | {100 * r['rel_excess']:+.1f}% |")
  agree = "yes" if verdicts and all(verdicts) else ("partly" if any(verdicts) else "no")
  lines += ["", PAPER, "", "sbjax here: " + " ".join(found),
            f"Consistent with the 0.6 threshold (W-error(r*) <= 0.6 <= W-error(r-)): {agree}."]
  return "\n".join(lines) + "\n"
