"""The exact Fig. 8 / Theorem 5.3 of Godey et al. (2024) on the cached exact floors: floor(r) − H
of each planted language of the run (planted_floor.csv; planted_mix_floor.csv) against the raw,
centred and √π-weighted W-error(r) of its target logits (``sbjax.studies.target_werror``), and
the W-error at which the floor gap opens (floor − H > the knee tolerance).

The languages are rebuilt from planted_meta.json (``language``, ``mixture``: the parameters that
define them; nothing is sampled or fitted here), so this reads only what ``run`` wrote. Languages
with more than ``MAX_ENTRIES`` table entries are skipped (the SVD is of a C × V matrix)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..shared import read_rows, save_figure, upath, write_rows  # noqa: E402
from sbjax.data.builders import language_of  # noqa: E402
from sbjax.studies.target_werror import VARIANTS, gap_opens, language_werror  # noqa: E402

CSV = "planted_fig8.csv"
FIG = "fig_planted_fig8.png"
MAX_ENTRIES = 1 << 22
PARTS = (("language", "planted_floor.csv"), ("mixture", "planted_mix_floor.csv"))


def rows(out: Path) -> list[dict]:
  """One row per (language, cached floor rank): floor_gap and the three target W-errors."""
  out = upath(out)
  meta = json.loads((out / "planted_meta.json").read_text())
  res = []
  for key, csv in PARTS:
    info = meta.get(key)
    if not info or not (out / csv).exists() or \
        int(info.get("n_contexts", 0)) * int(info.get("vocab", 0)) > MAX_ENTRIES:
      continue
    fl = read_rows(out / csv)
    we = language_werror(language_of(info), [int(r["rank"]) for r in fl])
    for i, r in enumerate(fl):
      res.append({"language": key, "kind": info["kind"], "k": int(info["rank"]),
                  "rank": int(r["rank"]), "floor_gap": max(float(r["floor_gap"]), 0.0),
                  **{f"werror_{v}": float(we[v][i]) for v in VARIANTS}})
  return res


def write(out: Path) -> list[dict]:
  """planted_fig8.csv and fig_planted_fig8.png (nothing without a language in the meta)."""
  rs = rows(out)
  if not rs:
    return rs
  write_rows(upath(out) / CSV, rs)
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
  for ax, v in zip(axes, VARIANTS):
    for j, lang in enumerate(sorted({r["language"] for r in rs})):
      sel = [r for r in rs if r["language"] == lang]
      ax.plot([r[f"werror_{v}"] for r in sel], [r["floor_gap"] for r in sel], "o-", color=f"C{j}",
              label=f"{lang} ({sel[0]['kind']}, k={int(sel[0]['k'])})")
    ax.set_xlabel(f"W-error(r) of the target, {v}")
    ax.set_yscale("symlog", linthresh=1e-3)
  axes[0].set_ylabel("floor(r) − H (nats)")
  axes[0].legend(fontsize=8)
  fig.suptitle("exact floors against the target's W-error (Godey et al. Fig. 8, exact)")
  fig.tight_layout()
  save_figure(fig, upath(out) / FIG, dpi=100)
  plt.close(fig)
  return rs


def _w(v) -> str:
  return f"{v:.3f}" if math.isfinite(v) else "–"


def sentence(rs: list[dict], tol: float) -> str:
  """Per language, the W-error interval where the floor gap opens (> tol), in each variant."""
  parts = []
  for lang in sorted({r["language"] for r in rs}):
    sel = [r for r in rs if r["language"] == lang]
    gaps = [r["floor_gap"] for r in sel]
    iv = {v: gap_opens([r[f"werror_{v}"] for r in sel], gaps, tol) for v in VARIANTS}
    ranks = ", ".join(str(int(r["rank"])) for r in sel)
    head = f"{lang} ({sel[0]['kind']}, k = {int(sel[0]['k'])}, ranks {ranks})"
    if all(g > tol for g in gaps):
      parts.append(f"{head}: the gap is open at every cached rank (smallest W-error: "
                   + ", ".join(f"{v} {_w(iv[v][1])}" for v in VARIANTS) + ")")
    elif all(g <= tol for g in gaps):
      parts.append(f"{head}: the gap never opens at the cached ranks (largest W-error: "
                   + ", ".join(f"{v} {_w(iv[v][0])}" for v in VARIANTS) + ")")
    else:
      parts.append(f"{head}: the gap opens between W-error "
                   + ", ".join(f"{_w(iv[v][0])} and {_w(iv[v][1])} ({v})" for v in VARIANTS))
  return (f"Exact Fig. 8: floor(r) − H against the W-error(r) of the target logits (the loss gap "
          f"'opens' when floor − H > {tol}; Godey et al. see the loss rise once a head's W-error "
          "passes ≈ 0.6): " + "; ".join(parts) + ".")


def lines(out: Path, rel: str, tol: float) -> list[str]:
  """The report's table, figure and sentence (from planted_fig8.csv; [] without it)."""
  out = upath(out)
  if not (out / CSV).exists():
    return []
  rs = read_rows(out / CSV)
  head = ["", "### Exact floors against the target's W-error (Fig. 8 / Theorem 5.3)", "",
          f"![floor gap vs W-error]({rel}/{FIG})", "",
          "| language | rank | floor − H | W-error raw | centred | √π-weighted |",
          "|---|---|---|---|---|---|"]
  body = [f"| {r['language']} | {int(r['rank'])} | {r['floor_gap']:.4f} | "
          f"{r['werror_raw']:.4f} | {r['werror_centred']:.4f} | {r['werror_weighted']:.4f} |"
          for r in rs]
  return head + body + ["", sentence(rs, tol)]
