r"""W-error against loss (Godey et al. 2024, E7, Fig. 8): the head-rank sweep's best-LR rank-r
runs against the W-error of the sweep's full-rank (dense) head W (``full_head.npy``, V x d),

    W-error(r) = sqrt(sum_{i>r} sigma_i^2) / ||W||_F   (sigma: the singular values of W).

The sweep (``experiments.head_rank``) is read from OUT/../head_rank when that holds head_rank's
finished run at the same preset (the suite runs it first), else trained into OUT itself. Per protocol, r* = the smallest rank whose
loss is within ``tol`` (relative) of the full-rank loss and r- the next smaller rank: the
threshold (0.6) is consistent with the runs when W-error(r*) <= 0.6 <= W-error(r-). Outputs in
OUT: ``werror_loss.csv`` (protocol, rank, w_error, eval_loss, eval_acc, lr, rel_excess =
eval_loss / L_full - 1), ``werror_curve.csv`` (d, w_error for d = 0..n), ``summary.json`` and
``fig_werror_loss``.
"""

from __future__ import annotations

import json

import numpy as np

from sbjax.experiment import Experiment, figure
from sbjax.paths import upath
from sbjax.studies.head_rank import best_rows
from sbjax.studies.werror import first_within, rank_at, w_error_curve

from .. import head_rank
from ..common import fmt, md_table, read_rows, write_json, write_rows
from .presets import PRESETS

CSV, CURVE, SUMMARY = "werror_loss.csv", "werror_curve.csv", "summary.json"


def source(ctx):
  """The folder of the sweep this reads (module doc); ``ctx.out``: trained here."""
  sib = ctx.out.parent / "head_rank"
  ran = json.loads((sib / "run.json").read_text()) if (sib / "run.json").exists() else {}
  same = ran.get("experiment") == "head_rank" and ran.get("preset") == ctx.preset_name
  return sib if same else ctx.out


def plan(ctx):
  if source(ctx) == ctx.out:
    yield from head_rank.plan(ctx)


def _protocol(best, curve, limit: float, k) -> dict:
  ranks = [int(r["rank"]) for r in best]
  rstar = first_within(ranks, [float(r["eval_loss"]) for r in best], limit)
  lower = [r for r in ranks if rstar is not None and r < rstar]
  rminus = max(lower) if lower else None
  w = {r: None if r is None else float(curve[r]) for r in (rstar, rminus)}
  return {"r_star": rstar, "w_error_r_star": w[rstar], "r_minus": rminus,
          "w_error_r_minus": w[rminus], "consistent_with_0.6":
          w[rstar] is not None and w[rminus] is not None and w[rstar] <= k.threshold <= w[rminus]}


def tables(ctx) -> None:
  src, k = source(ctx), ctx.knobs
  if src == ctx.out:
    head_rank.write_sweep(ctx)
  rows = read_rows(src / head_rank.CSV, head_rank.TEXT)
  with upath(src / head_rank.FULL_HEAD).open("rb") as f:
    sigma, curve = w_error_curve(np.load(f, allow_pickle=False))
  write_rows(ctx.out / CURVE, [{"d": d, "w_error": float(v)} for d, v in enumerate(curve)])
  full = next(r for r in rows if r["protocol"] == "full" and int(r["best"]))
  lf = float(full["eval_loss"])
  table = [{"protocol": "full", "head": "dense", "rank": int(full["rank"]), "w_error": 0.0,
            "eval_loss": lf, "eval_acc": float(full["eval_acc"]), "lr": float(full["lr"]),
            "rel_excess": 0.0}]
  summary = {"full_loss": lf, "head_rank_dir": str(src), "n_sigma": len(sigma),
             "rank_at_werror_0.6": rank_at(curve, k.threshold), "tol": k.tol,
             "threshold": k.threshold}
  for p in ("a", "b"):
    best = best_rows(rows, p)
    if best:
      table += [{"protocol": p, "head": "lowrank", "rank": int(r["rank"]),
                 "w_error": float(curve[int(r["rank"])]), "eval_loss": float(r["eval_loss"]),
                 "eval_acc": float(r["eval_acc"]), "lr": float(r["lr"]),
                 "rel_excess": float(r["eval_loss"]) / lf - 1.0} for r in best]
      summary[p] = _protocol(best, curve, (1.0 + k.tol) * lf, k)
  write_rows(ctx.out / CSV, table)
  write_json(ctx.out / SUMMARY, summary)


def draw(out) -> None:
  """The W-error curve of the full-rank head; each best-LR run's loss against its W-error."""
  plt, s = figure.pyplot(), json.loads((out / SUMMARY).read_text())
  curve, rows = read_rows(out / CURVE), read_rows(out / CSV, ("protocol", "head"))
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  axes[0].plot([c["d"] for c in curve[1:]], [c["w_error"] for c in curve[1:]], "-", color="k")
  axes[0].set(xlabel="rank d of the approximation", ylabel="W-error(d) of the full-rank head")
  axes[0].set_xscale("log", base=2)
  for p, marker, name in (("a", "o-", "(a) frozen trunk"), ("b", "s-", "(b) from scratch")):
    sel = sorted((r for r in rows if r["protocol"] == p), key=lambda r: r["rank"])
    if sel:
      axes[1].plot([r["w_error"] for r in sel], [r["eval_loss"] for r in sel], marker,
                   label=name)
    for r in sel:
      axes[1].annotate(f"r={int(r['rank'])}", (r["w_error"], r["eval_loss"]), fontsize=6,
                       xytext=(3, 3), textcoords="offset points")
  axes[1].axhline(s["full_loss"], color="k", ls="--", lw=1, label="dense head")
  axes[1].set(xlabel="W-error(r) of the full-rank head",
              ylabel="validation loss of the rank-r run (nats)")
  for ax in axes:
    (ax.axhline if ax is axes[0] else ax.axvline)(s["threshold"], color="r", ls=":",
                                                   label=f"W-error = {s['threshold']}")
    ax.legend(fontsize=7)
  figure.save(fig, out, "fig_werror_loss", "Loss vs W-error (Godey Fig. 8 analogue)")


def report(out, rel: str = ".") -> str:
  rows, s = read_rows(out / CSV, ("protocol", "head")), json.loads((out / SUMMARY).read_text())
  rows = sorted(rows, key=lambda r: (r["protocol"], r["rank"]))
  lines = [f"![loss vs W-error]({rel}/{figure.name('fig_werror_loss')})", "",
           *md_table(rows, ["protocol", "rank", "w_error", "eval_loss", "rel_excess"]), "",
           (f"- The full-rank head reaches W-error <= {s['threshold']} at rank "
            f"{s['rank_at_werror_0.6']} of {s['n_sigma']}.")]
  for p in (p for p in "ab" if p in s):
    x = s[p]
    lines.append(f"- ({p}): r* (smallest rank within {100 * s['tol']:g}% of the full-rank loss)"
                 f" = {fmt(x['r_star'])} (W-error {fmt(x['w_error_r_star'], spec='.3f')}), r- = "
                 f"{fmt(x['r_minus'])} (W-error {fmt(x['w_error_r_minus'], spec='.3f')}); "
                 f"W-error(r*) <= {s['threshold']} <= W-error(r-): "
                 f"**{'yes' if x['consistent_with_0.6'] else 'no'}**.")
  return "\n".join(lines)


EXPERIMENT = Experiment("werror_loss", PRESETS, plan, tables=tables, figures=draw,
                        report=report, doc=__doc__)
