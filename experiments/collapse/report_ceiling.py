"""The ceiling part of the collapse report: the table of the Bayes-optimal model's NC1–NC4 on
the planted language and the figure of trained models' metrics against their gap to the
entropy (read only from collapse_ceiling*.csv)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from .findings import ceiling_sentence  # noqa: E402
from ..shared import fmt, read_rows, finish_figure, upath  # noqa: E402

FIGURE = "fig_collapse_ceiling.png"
SHOWN = ("nc1_log10_mean_cdnv", "nc2_norm_cov", "etf_error", "gnc2_log_kernel_mean",
         "nc3_cos_mean", "unc3_cos_cov", "dual_error", "nc4_agreement")


def figure(out: Path, ceil: list[dict], trained: list[dict]) -> Path:
  """Each metric vs the gap to H (log x), one line per run, the ceiling as horizontal lines."""
  fig, axes = plt.subplots(2, 4, figsize=(16, 6.4))
  runs = sorted({r["run"] for r in trained})
  for ax, k in zip(axes.ravel(), SHOWN):
    for run in runs:
      rr = sorted((r for r in trained if r["run"] == run), key=lambda r: r["step"])
      gap = np.maximum([float(r["gap"]) for r in rr], 1e-4)
      ax.plot(gap, [float(r[k]) for r in rr], "o-", ms=3, label=run.split("-")[-1])
    for c, ls in zip(ceil, ("--", ":")):
      ax.axhline(float(c[k]), color="k", ls=ls, lw=1, label=f"ceiling ({c['variant']})")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.invert_xaxis()
    ax.set_title(k, fontsize=9)
    ax.set_xlabel("gap to H (nats)", fontsize=8)
    ax.tick_params(labelsize=7)
  axes.ravel()[0].legend(fontsize=7)
  title = ("collapse metrics of models trained on the planted language vs their gap to the "
           "entropy (training runs right to left); dashed/dotted: the Bayes-optimal model")
  return finish_figure(fig, upath(out) / FIGURE, title, dpi=100, fontsize=10)


def ceiling_lines(out: Path, rel: str) -> list[str]:
  """The markdown lines of the ceiling part ([] when the preset has none)."""
  out = upath(out)
  if not (out / "collapse_ceiling.csv").exists():
    return []
  ceil = read_rows(out / "collapse_ceiling.csv")
  c0 = ceil[0]
  lines = ["", "### The collapse ceiling of a planted language", "",
           f"Planted-rank language V={int(c0['vocab'])}, k={int(c0['planted_rank'])} (context 1, "
           f"entropy H = {fmt(c0['entropy'])} nats). Its Bayes-optimal model (features of width "
           f"{int(c0['width'])} = k+1, loss = H) is known exactly; its collapse metrics are "
           "those of a perfect model of this language. The optimal factorisation is not unique "
           "(H A, W A⁻ᵀ are optimal too): two canonical ones are shown, the least-norm "
           "(balanced, what weight decay favours) and the planted one; NC1–NC3 of other optimal "
           "factorisations can differ, so these are reference points, not bounds.", "",
           "| variant | " + " | ".join(SHOWN) + " |", "|---" * (len(SHOWN) + 1) + "|"]
  for c in ceil:
    lines.append(f"| {c['variant']} | " + " | ".join(fmt(c[k], 3) for k in SHOWN) + " |")
  path = out / "collapse_ceiling_trained.csv"
  if path.exists():
    trained = read_rows(path)
    figure(out, ceil, trained)
    last = max(int(r["step"]) for r in trained)
    lines += ["", f"![collapse metrics vs gap to H]({rel}/{FIGURE})", "",
              f"Trained models at their last snapshot (step {last}):", "",
              "| run | gap to H | " + " | ".join(SHOWN) + " |", "|---" * (len(SHOWN) + 2) + "|"]
    for r in trained:
      if int(r["step"]) == last:
        lines.append(f"| {r['run']} | {fmt(r['gap'], 3)} | "
                     + " | ".join(fmt(r[k], 3) for k in SHOWN) + " |")
    lines += ["", ceiling_sentence(ceil, trained, SHOWN)]
  return lines
