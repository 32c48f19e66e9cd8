"""The collapse report, read only from OUT's files: Fig. 1 (every metric against validation loss),
the ceiling's figure, the markdown tables, the pre-registered rule's verdict and the trend it
rests on (``rule_lines``)."""

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
  red: the seed groups, a marker per shape), titled with R² and n of one point per run."""
  rows = _models(out)
  grid, m0 = [r for r in rows if r["kind"] == "grid"], rows[0]["min_count"]
  seeds = [r for r in rows if r["kind"] == "seeds" and r["last_snapshot"]]
  r2 = {r["metric"]: r for r in read_rows(out / "collapse_r2.csv")
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
    t = r2.get(k, {})
    ax.set_title(f"{k}\nR²={fmt(t.get('r2'), spec='.2f')}, n={fmt(t.get('n'))} runs", fontsize=9)
  for ax in axes.ravel()[len(METRICS):]:
    ax.axis("off")
  figure.save(fig, out, FIG, f"collapse metrics vs validation loss (min_count {int(m0)})")


def _fig_ceiling(out, plt) -> None:
  """Each metric against the gap to the entropy, one line per run; the ceiling's variants as
  horizontal lines."""
  ceil, trained = (read_rows(out / f"collapse_ceiling{s}.csv") for s in ("", "_trained"))
  from matplotlib.ticker import LogFormatter  # noqa: PLC0415 - matplotlib loads with the figures

  fig, axes = plt.subplots(2, 4, figsize=(16, 6.4))
  for ax, k in zip(axes.ravel(), SHOWN):
    for run in sorted({r["run"] for r in trained}):
      rr = sorted((r for r in trained if r["run"] == run), key=lambda r: r["step"])
      ax.plot(np.maximum(column(rr, "gap"), 1e-4), column(rr, k), "o-", ms=3, label=run)
    for c, ls in zip(ceil, ("--", ":")):
      ax.axhline(float(c[k]), color="k", ls=ls, lw=1, label=f"ceiling ({c['variant']})")
    ax.set(xscale="log", xlabel="gap to H (nats)", title=k)
    for set_formatter in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
      set_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
    ax.invert_xaxis()
  axes.ravel()[0].legend(fontsize=7)
  figure.save(fig, out, FIG_CEIL, "models trained on the planted language vs their gap to H")


def figures(out) -> None:
  out, plt = upath(out), figure.pyplot()
  _fig_models(out, plt)
  if (out / "collapse_ceiling_trained.csv").exists():
    _fig_ceiling(out, plt)


def _rci(r: dict, p: str = "") -> str:
  """'+0.590 [+0.030, +0.870], n 12' of the statistic of column prefix ``p`` ('' = r)."""
  a, b = float(r[f"{p}ci_lo"]), float(r[f"{p}ci_hi"])
  ci = f"[{a:+.3f}, {b:+.3f}]" if math.isfinite(a) and math.isfinite(b) else "–"
  n = f", n {fmt(r[f'{p}n'])}" + (f", {fmt(r['within_shapes'])} shapes" if p == "within_" else "")
  return f"{fmt(r[f'{p}r' if p else 'pearson_r'], spec='+.3f')} {ci}{n}"


def _tables(out) -> list[str]:
  """The grid's R², r, partial and within-shape r with intervals, against the authors'."""
  r2 = read_rows(out / "collapse_r2.csv", text=("paper_sign",))
  every = {(r["metric"], r["min_count"]): r for r in r2 if r["points"] == "all"}
  r2n = lambda r: f"{fmt(r['r2'], spec='.3f')}, n {fmt(r['n'])}"  # noqa: E731
  grid = [{"metric": r["metric"], "min_count": r["min_count"], "R², n": r2n(r),
           "authors' R² (sign)": f"{fmt(r['paper_r2'], spec='.2f')} ({r['paper_sign'] or '–'})",
           "r [95% CI], n": _rci(r), "verdict": r["ci_verdict"],
           "partial r [95% CI], n": _rci(r, "partial_"), "partial verdict": r["partial_ci_verdict"],
           "within-shape r [95% CI], n": _rci(r, "within_"),
           "R² all snapshots, n": r2n(every[(r["metric"], r["min_count"])])}
          for r in r2 if r["points"] == "last"]
  return ["", ("The grid, one point per run (its last snapshot): R², r, the partial r on "
               "log(parameters) and the pooled within-shape r (x and loss centred within each "
               "L x d) with their 95% Fisher-z intervals, R² over every snapshot, and the "
               "authors' R² (computed from their released results): a claimed sign is "
               "supported (refuted) when the interval excludes 0 on its (the other) side:"),
          "", *md_table(grid, list(grid[0]), ".3f")]


WHAT = {"nc3_cos_mean": "self-dual (NC3)", "unc3_cos_cov": "uniform in duality (UNC3)",
        "gnc2_log_kernel_mean": "uniform on the sphere (GNC2)"}


def rule_lines(out, s: dict) -> list[str]:
  """The pre-registered rule and its verdict, read as trends (per metric, its intervals of r
  and of the partial r on log(parameters) all on one side, at every min_count), and the sign
  of NC3's mean cosine, whose flip alone would flip UNC3 = std/mean."""
  d = s["decision"]
  trend = []
  for k, what in WHAT.items():
    side = {v for c, v in d["sides"].items() if c.startswith(f"{k}@")}
    trend.append(f"more {what} (the authors' trend)" if side == {1} else
                 f"less {what} (reversed)" if side == {-1} else f"{what}: undecided")
  v = column([r for r in read_rows(out / "collapse_models.csv")
              if r["kind"] == "grid" and r["last_snapshot"] == 1], "nc3_cos_mean")
  return ["", f"**Pre-registered rule.** {s['rule']['text']} **Verdict: {d['verdict']}** "
          f"({d['reason']}).", "", "Read as trends, with and without the size control: the "
          f"better models here are {'; '.join(trend)}. NC3's mean cosine is positive in "
          f"{int((v > 0).sum())} of {v.size} runs × min_counts here, as in all 230 of the "
          "authors' models: " + ("a reversal is one of the trend, not of NC3's sign." if (
              v > 0).all() else "where it is negative UNC3 flips sign with it, and UNC3's r "
                                "is not comparable with theirs.")]


def _seed_lines(out, n_perm: int) -> list[str]:
  if not (out / "collapse_seeds.csv").exists():
    return []
  table = [{"group": r["group"], "metric": r["metric"], "min_count": r["min_count"],
            "r [95% CI], n": _rci(r), "r ≠ 0?": r["ci_verdict"], "p": r["p_perm"]}
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
      "", "No grid in this preset: the R² table needs one (`--preset=gpu-grid`)."]
  lines += rule_lines(out, s) if s.get("decision") else []
  return "\n".join(lines + _seed_lines(out, s["n_permutations"]) + _ceiling_lines(out, rel))
