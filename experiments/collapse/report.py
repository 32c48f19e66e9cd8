"""The collapse report, read only from OUT's files: Fig. 1 (every metric against validation loss),
the ceiling's figure and the markdown tables."""

from __future__ import annotations

import json
import math

import numpy as np

from sbjax.experiment import figure
from sbjax.paths import upath

from ..common import fmt, md_table, read_rows
from .tables import METRICS, column

FIG, FIG_CEIL = "fig_collapse_vs_loss", "fig_collapse_ceiling"
SHOWN = ("nc1_log10_mean_cdnv", "nc2_norm_cov", "etf_error", "gnc2_log_kernel_mean",
         "nc3_cos_mean", "unc3_cos_cov", "dual_error", "nc4_agreement")


def _models(out) -> list[dict]:
  """collapse_models.csv at the smallest min_count."""
  m0 = json.loads((out / "summary.json").read_text())["min_counts"][0]
  return [r for r in read_rows(out / "collapse_models.csv") if int(r["min_count"]) == m0]


def _fig_models(out, plt) -> None:
  """Each metric against validation loss (colour: depth, size: width, filled: last snapshot;
  red: the seed groups, a marker per shape), titled with R² of one point per run."""
  rows = _models(out)
  grid, m0 = [r for r in rows if r["kind"] == "grid"], rows[0]["min_count"]
  seeds = [r for r in rows if r["kind"] == "seeds" and r["last_snapshot"]]
  r2 = {r["metric"]: r["r2"] for r in read_rows(out / "collapse_r2.csv")
        if r["min_count"] == m0 and r["points"] == "last"}
  depths = sorted({r["n_layers"] for r in grid})
  fig, axes = plt.subplots(5, 4, figsize=(16, 16))
  for ax, k in zip(axes.ravel(), METRICS):
    for r in grid:
      c = plt.get_cmap("viridis")(depths.index(r["n_layers"]) / max(len(depths) - 1, 1))
      ax.scatter(r[k], r["val_loss"], s=10 + 8 * math.log2(r["d_model"] / 16 + 1),
                 color=c if r["last_snapshot"] else "none", edgecolors=c)
    for j, g in enumerate(dict.fromkeys(r["group"] for r in seeds)):
      sg = [r for r in seeds if r["group"] == g]
      ax.scatter(column(sg, k), column(sg, "val_loss"), s=12, color="red", marker="x+1"[j % 3])
    ax.set_title(f"{k}\nR²={fmt(r2.get(k), spec='.2f')} (one point per run)", fontsize=9)
  for ax in axes.ravel()[len(METRICS):]:
    ax.axis("off")
  figure.save(fig, out, FIG, f"collapse metrics vs validation loss (min_count {int(m0)})")


def _fig_ceiling(out, plt) -> None:
  """Each metric against the gap to the entropy, one line per run; the ceiling's variants as
  horizontal lines."""
  ceil, trained = (read_rows(out / f"collapse_ceiling{s}.csv") for s in ("", "_trained"))
  fig, axes = plt.subplots(2, 4, figsize=(16, 6.4))
  for ax, k in zip(axes.ravel(), SHOWN):
    for run in sorted({r["run"] for r in trained}):
      rr = sorted((r for r in trained if r["run"] == run), key=lambda r: r["step"])
      ax.plot(np.maximum(column(rr, "gap"), 1e-4), column(rr, k), "o-", ms=3, label=run)
    for c, ls in zip(ceil, ("--", ":")):
      ax.axhline(float(c[k]), color="k", ls=ls, lw=1, label=f"ceiling ({c['variant']})")
    ax.set(xscale="log", xlabel="gap to H (nats)", title=k)
    ax.invert_xaxis()
  axes.ravel()[0].legend(fontsize=7)
  figure.save(fig, out, FIG_CEIL, "models trained on the planted language vs their gap to H")


def figures(out) -> None:
  out, plt = upath(out), figure.pyplot()
  _fig_models(out, plt)
  if (out / "collapse_ceiling_trained.csv").exists():
    _fig_ceiling(out, plt)


def _ci(r: dict, p: str = "") -> str:
  a, b = float(r[f"{p}ci_lo"]), float(r[f"{p}ci_hi"])
  return f"[{a:+.3f}, {b:+.3f}]" if math.isfinite(a) and math.isfinite(b) else "–"


def _tables(out) -> list[str]:
  """The grid's R² and intervals, the comparison with the authors, the seed groups."""
  r2 = read_rows(out / "collapse_r2.csv")
  every = {(r["metric"], r["min_count"]): r["r2"] for r in r2 if r["points"] == "all"}
  grid = [{"metric": r["metric"], "min_count": r["min_count"], "n": r["n"], "R²": r["r2"],
           "r [95% CI]": f"{fmt(r['pearson_r'], spec='+.3f')} {_ci(r)}",
           "partial r [95% CI]": f"{fmt(r['partial_r'], spec='+.3f')} {_ci(r, 'partial_')}",
           "R² all snapshots": every[(r["metric"], r["min_count"])]}
          for r in r2 if r["points"] == "last"]
  an = read_rows(out / "collapse_anchors.csv")
  anchors = [{"metric": r["metric"], "min_count": r["min_count"], "our R²": r["r2"],
              "authors' R²": r["authors_r2"], "authors' sign": r["authors_sign"],
              "point verdict": r["verdict"], "interval verdict": r["ci_verdict"],
              "partial verdict": r["partial_verdict"]} for r in an]
  return ["", ("The grid, one point per run (its last snapshot): R², r and the partial r on "
               "log(parameters) with their 95% Fisher-z intervals, and R² over every snapshot:"),
          "", *md_table(grid, list(grid[0]), ".3f"), "",
          (f"Against the authors' R² ({an[0]['authors_source']}): a claimed sign is supported "
           "(refuted) when the 95% interval of r excludes 0 on its (the other) side:"),
          "", *md_table(anchors, list(anchors[0]), ".3f")]


def _seed_lines(out, n_perm: int) -> list[str]:
  if not (out / "collapse_seeds.csv").exists():
    return []
  table = [{"group": r["group"], "metric": r["metric"], "min_count": r["min_count"], "n": r["n"],
            "r [95% CI]": f"{fmt(r['pearson_r'], spec='+.3f')} {_ci(r)}",
            "r ≠ 0?": r["ci_verdict"], "p": r["p_perm"]}
           for r in read_rows(out / "collapse_seeds.csv")]
  return ["", f"Seed-only groups (last snapshot; permutation p over {n_perm} permutations):", "",
          *md_table(table, list(table[0]), ".3f")]


def _ceiling_lines(out, rel: str) -> list[str]:
  if not (out / "collapse_ceiling.csv").exists():
    return []
  ceil = read_rows(out / "collapse_ceiling.csv")
  c = ceil[0]
  lines = ["", (f"The collapse ceiling of the planted language V={int(c['vocab'])}, "
                f"k={int(c['planted_rank'])} (entropy H = {fmt(c['entropy'])} nats): the "
                f"Bayes-optimal model of width {int(c['width'])}, two factorisations:"),
           "", *md_table(ceil, ["variant", *SHOWN], ".3f")]
  if (out / "collapse_ceiling_trained.csv").exists():
    tr = read_rows(out / "collapse_ceiling_trained.csv")
    last = max(r["step"] for r in tr)
    lines += ["", f"![collapse ceiling]({rel}/{figure.name(FIG_CEIL)})", "",
              f"Trained on it, step {last}:", "",
              *md_table([r for r in tr if r["step"] == last], ["run", "gap", *SHOWN], ".3f")]
  return lines


def report(out, rel: str = ".") -> str:
  out = upath(out)
  s, rows = json.loads((out / "summary.json").read_text()), _models(out)
  grid = [r for r in rows if r["kind"] == "grid"]
  gam = ", ".join(f"λ={k}: Γ={v:.3f}" for k, v in s["weight_decay"]["gamma"].items())
  lines = [(f"{len({r['run'] for r in grid})} grid runs ({len(grid)} snapshots), "
            f"{len({r['run'] for r in rows if r['kind'] == 'seeds'})} seed-group runs; "
            f"vocabulary {s['vocab_size']}, {s['train_tokens']} training tokens per epoch, "
            f"{s['val_tokens']} validation tokens; weight-decay strength Γ = λ·Σ lr: {gam}."),
           "", f"![collapse metrics vs validation loss]({rel}/{figure.name(FIG)})"]
  lines += _tables(out) if grid else [
      "", "No grid in this preset: the R² and anchor tables need one (`--preset=gpu-grid`)."]
  tk = read_rows(out / "collapse_tokens.csv", text=("token",))
  for r in tk:
    r["token"] = "`" + str(r["token"]).replace("|", "\\|").replace("\n", "\\n") + "`"
  lines += _seed_lines(out, s["n_permutations"])
  lines += ["", f"The most frequent tokens of the best model `{tk[0]['model']}` (their Table 5):",
            "", *md_table(tk, ["rank", "token", "count", "log10_cdnv", "interference"], ".3f")]
  return "\n".join(lines + _ceiling_lines(out, rel))
