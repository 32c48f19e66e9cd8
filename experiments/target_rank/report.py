"""target_rank's report: the Fig. 7 analogue per variant and the markdown section (monotonicity,
each variant against raw, the rank at d_ref), read only from the CSVs and the meta record."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
import numpy as np  # noqa: E402

from ..shared import fmt, read_rows, save_figure, upath  # noqa: E402

CSV = "target_rank.csv"
CONTEXTS_CSV = "target_rank_contexts.csv"
META = "target_rank_meta.json"
FIELDS = ("variant", "n", "V", "d", "w_error", "C", "nnz", "method", "min_count", "k")
# integer columns of the two CSVs (read back as int: the report prints them as written)
INTS = ("n", "V", "d", "C", "nnz", "min_count", "n_pairs", "n_contexts_seen", "n_contexts_kept",
        "kept_pairs", "vocab_size")


def read_table(path) -> list[dict]:
  """The rows of target_rank.csv or target_rank_contexts.csv (integer columns as int)."""
  return [{k: int(v) if k in INTS and isinstance(v, float) and math.isfinite(v) else v
           for k, v in r.items()} for r in read_rows(path)]


def draw(out: Path) -> list[Path]:
  """fig_target_rank_<variant>.png: one panel per V, one W-error curve per n."""
  rows = read_table(upath(out) / CSV)
  paths = []
  for var in sorted({r["variant"] for r in rows}, key=_variant_order):
    sub = [r for r in rows if r["variant"] == var]
    vs = sorted({r["V"] for r in sub})
    fig, axes = plt.subplots(1, len(vs), figsize=(4.2 * len(vs), 3.6), squeeze=False,
                             sharey=True)
    for ax, v in zip(axes[0], vs):
      for n in sorted({r["n"] for r in sub if r["V"] == v}):
        cur = sorted((r for r in sub if r["V"] == v and r["n"] == n), key=lambda r: r["d"])
        ax.plot([r["d"] for r in cur], [r["w_error"] for r in cur], "o-", ms=3,
                label=f"n={n} (C={cur[0]['C']})")
      ax.set_xscale("log", base=2)
      ax.set_xlabel("d")
      ax.set_title(f"V={v}", fontsize=10)
      ax.grid(alpha=0.3)
      ax.legend(fontsize=7)
    axes[0][0].set_ylabel("W-error(d)")
    fig.suptitle(f"W-error of the {var} next-token matrix (Godey Fig. 7 analogue)", fontsize=11)
    fig.tight_layout()
    path = upath(out) / f"fig_target_rank_{var}.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    paths.append(path)
  return paths


def _variant_order(v: str) -> int:
  order = ("raw", "addk", "logp", "logp_centered")
  return order.index(v) if v in order else len(order)


def findings(rows: list[dict]) -> dict:
  """Monotonicity of every curve and the comparison of each variant with raw, per point."""
  curves_ = {}
  for r in rows:
    curves_.setdefault((r["variant"], r["V"], r["n"]), []).append(r)
  n_curves = len(curves_)
  not_decreasing = []
  for key, cur in curves_.items():
    w = np.array([r["w_error"] for r in sorted(cur, key=lambda r: r["d"])])
    if np.any(np.diff(w) > 1e-12):
      not_decreasing.append(key)
  raw = {(r["V"], r["n"], r["d"]): r["w_error"] for r in rows if r["variant"] == "raw"}
  comp = {}
  for var in sorted({r["variant"] for r in rows} - {"raw"}, key=_variant_order):
    pts = [(r["w_error"], raw[(r["V"], r["n"], r["d"])]) for r in rows
           if r["variant"] == var and (r["V"], r["n"], r["d"]) in raw and r["d"] < r["C"]
           and r["d"] < r["V"]]
    lower = sum(1 for a, b in pts if a < b)
    comp[var] = {"points": len(pts), "lower_than_raw": lower,
                 "mean_diff": float(np.mean([a - b for a, b in pts])) if pts else math.nan}
  return {"n_curves": n_curves, "not_decreasing": not_decreasing, "vs_raw": comp}


def p_max_d(rows, vocab, n) -> int:
  return max(r["d"] for r in rows if r["variant"] == "raw" and r["V"] == vocab and r["n"] == n)


def _cmp_word(cm: dict) -> str:
  if cm["lower_than_raw"] == cm["points"]:
    return "lower than raw at every d"
  if cm["lower_than_raw"] == 0:
    return "higher than raw at every d"
  return f"lower than raw at {cm['lower_than_raw']} of {cm['points']} points"


def _log_verdict(vs_raw: dict) -> str:
  lg, lgc = vs_raw.get("logp", {}), vs_raw.get("logp_centered", {})
  if not lg.get("points"):
    return "the smoothed log variant was not computed"
  txt = "the smoothed log-probability matrix is " + _cmp_word(lg)
  if lgc.get("points"):
    txt += ("; much of that comes from its row-constant part log(k/(n_c + kV)), which softmax "
            "ignores: row-centred (logp_centered) it is " + _cmp_word(lgc))
  return txt


def report_section(out: Path, rel: str) -> str:
  out = upath(out)
  rows = read_table(out / CSV)
  ctx = read_table(out / CONTEXTS_CSV)
  meta = json.loads((out / META).read_text()) if (out / META).exists() else {}
  pf = meta.get("preset_fields", {})
  d_ref = int(pf.get("d_ref", 64))
  variants = sorted({r["variant"] for r in rows}, key=_variant_order)
  lines = ["## target_rank (Godey et al. 2024, E6)", ""]
  if meta:
    lines += [f"Preset `{meta['preset']}`: corpus `{meta['corpus']}`, V in "
              f"{sorted(int(v) for v in meta['data'])}, contexts of the last n tokens seen >= "
              f"{pf.get('min_count')} times, add-k smoothing k={pf.get('k')}; "
              f"{meta['seconds'] / 60:.1f} min. The smoothed matrices are held as sparse + rank "
              "one and never densified.", ""]
  for var in variants:
    lines += [f"![W-error of the {var} matrix]({rel}/fig_target_rank_{var}.png)", ""]
  look = {(r["variant"], r["V"], r["n"], r["d"]): r["w_error"] for r in rows}
  lines += [f"W-error at d = {d_ref} (– where d >= min(C, V)):", "",
            "| V | n | C kept (of seen) | " + " | ".join(variants) + " |",
            "|---|---|---|" + "---|" * len(variants)]
  for c in sorted(ctx, key=lambda r: (r["V"], r["n"])):
    cells = []
    for var in variants:
      w = look.get((var, c["V"], c["n"], d_ref))
      cells.append("–" if w is None or d_ref >= min(c["n_contexts_kept"], c["V"])
                   else fmt(w, spec=".4f"))
    lines.append(f"| {c['V']} | {c['n']} | {c['n_contexts_kept']} ({c['n_contexts_seen']}) | "
                 + " | ".join(cells) + " |")
  f = findings(rows)
  paper = ("Godey et al. (2024, Fig. 7) found that the empirical next-token distribution "
           "matrices of n-gram contexts are high-rank: their W-error falls slowly with d, so a "
           "head of small dimension cannot represent the target exactly.")
  mono = ("W-error is non-increasing in d on every one of the "
          f"{f['n_curves']} curves" if not f["not_decreasing"] else
          f"W-error is NOT monotone on {len(f['not_decreasing'])} of {f['n_curves']} curves "
          f"({f['not_decreasing'][:3]})")
  comps = []
  for var, cm in f["vs_raw"].items():
    if cm["points"]:
      comps.append(f"{var} is below raw at {cm['lower_than_raw']} of {cm['points']} points "
                   f"(mean difference {cm['mean_diff']:+.4f})")
  lv = _log_verdict(f["vs_raw"])
  vmax = max(r["V"] for r in rows)
  raw_ref = {r["n"]: r["w_error"] for r in rows if r["variant"] == "raw" and r["V"] == vmax
             and r["d"] == d_ref and d_ref < min(r["C"], r["V"])}
  d06 = {}
  for r in sorted((r for r in rows if r["variant"] == "raw" and r["V"] == vmax),
                  key=lambda r: r["d"]):
    if r["w_error"] <= 0.6 and r["n"] not in d06:
      d06[r["n"]] = r["d"]
  rank_txt = ""
  if raw_ref:
    lo, hi = min(raw_ref.values()), max(raw_ref.values())
    rank_txt = (f" For the raw matrix at V={vmax}, W-error at d={d_ref} is {lo:.3f}–{hi:.3f} "
                f"over n = {sorted(raw_ref)}; it first reaches <= 0.6 at d = "
                + ", ".join(f"{d06[n]} (n={n})" if n in d06 else f"> {p_max_d(rows, vmax, n)} "
                            f"(n={n})" for n in sorted(raw_ref)) + ".")
    agree = ("The target is high-rank here too (W-error >= 0.2 at d = "
             f"{d_ref} for every n at V={vmax}), which agrees with the paper." if lo >= 0.2 else
             f"At V={vmax} the raw target is close to rank {d_ref} for some n (W-error "
             f"{lo:.3f} < 0.2), unlike the paper's high-rank finding: the corpus is small.")
  else:
    agree = f"No curve at V={vmax} reaches d={d_ref}, so the rank is not compared."
  if f["not_decreasing"]:
    agree += (" Some curves are not monotone: check the randomized SVD settings (more "
              "oversampling / power iterations).")
  lines += ["", f"{paper} Here: {mono}.{rank_txt} Against raw, per (V, n, d < min(C, V)): "
            + "; ".join(comps) + f". So {lv}. {agree}", ""]
  return "\n".join(lines)
