r"""W-error vs loss (Godey et al. 2024, E7 / Fig. 8): head-rank runs against W-error(r).

  python -m experiments.werror_loss --preset=cpu --out=out/werror_loss \
      [--head_rank_dir=out/head_rank]

Reads the head-rank sweep (``experiments.head_rank``; its directory defaults to
``OUT/../head_rank`` and is trained first, with the same preset, if it is not finished) and
puts each best-LR rank-r run's validation loss against

    W-error(r) = sqrt(sum_{i>r} sigma_i^2) / ||W||_F

of the full-rank (dense) head W (``full_head.npy``, V x d; sigma from an SVD). Outputs in
OUT: ``werror_loss.csv`` (protocol, rank, w_error, eval_loss, eval_acc, lr, rel_excess =
eval_loss / L_full - 1), ``werror_curve.csv`` (d, w_error for d = 0..n), ``summary.json`` and
``fig_werror_loss.png``.

Comparison with the paper (Fig. 8: loss rises once the W-error of the model's own head passes
about 0.6): per protocol, r* = the smallest rank whose loss is within 2% of the full-rank
loss, and the next smaller rank r-; the paper's threshold is consistent with the data when
W-error(r*) <= 0.6 <= W-error(r-).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

from absl import flags

from experiments import common

NAME = "werror_loss"
FIGURE = "fig_werror_loss.png"
THRESHOLD = 0.6  # Godey et al. (2024), Fig. 8
TOL = 0.02  # "within 2% of the full-rank loss"
PAPER = ("Godey et al. (2024, Fig. 8): for Pythia-1B the loss rises once the W-error of the "
         "model's own head passes about 0.6.")


def head_rank_dir(out: Path, given: str = "") -> Path:
  return Path(given) if given else Path(out).parent / "head_rank"


def _finished(hr: Path) -> bool:
  return (hr / "plan.json").is_file() and (hr / "full_head.npy").is_file()


def w_error_curve(w) -> "tuple":
  """(sigma, W-error(d) for d = 0..n) of a V x d head, via sbjax.metrics.spectrum (SVD)."""
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from sbjax.metrics import spectrum  # noqa: PLC0415

  s = spectrum.singular_values(jnp.asarray(w, jnp.float32), method="svd")
  n = int(s.shape[0])
  we = spectrum.w_error(s, jnp.arange(n + 1))
  return np.asarray(s, np.float64), np.asarray(we, np.float64)


def rank_at(curve, level: float) -> int:
  """The smallest d with W-error(d) <= level."""
  return int(next(d for d, v in enumerate(curve) if v <= level))


def threshold_rank(ranks, losses, full_loss: float, tol: float = TOL):
  """r* = the smallest rank with loss <= (1 + tol) * full_loss (None if there is none)."""
  ok = [r for r, l in sorted(zip(ranks, losses)) if l <= (1.0 + tol) * full_loss]
  return ok[0] if ok else None


def compute(out: Path, hr: Path) -> dict:
  import numpy as np  # noqa: PLC0415

  from sbjax.studies import rank_sweep as rs  # noqa: PLC0415
  from sbjax.analysis.table import atomic_write_json, write_csv  # noqa: PLC0415

  out.mkdir(parents=True, exist_ok=True)
  rows = rs.read_rows(hr)
  w = np.load(hr / rs.FULL_HEAD, allow_pickle=False)
  sigma, curve = w_error_curve(w)
  write_csv(out / "werror_curve.csv", [{"d": d, "w_error": float(v)} for d, v in enumerate(curve)])
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])][0]
  lf = float(full["eval_loss"])
  table = [{"protocol": "full", "head": "dense", "rank": int(full["rank"]), "w_error": 0.0,
            "eval_loss": lf, "eval_acc": float(full["eval_acc"]), "lr": float(full["lr"]),
            "rel_excess": 0.0}]
  summary = {"full_loss": lf, "head_rank_dir": str(hr), "n_sigma": len(sigma),
             "rank_at_werror_0.6": rank_at(curve, THRESHOLD), "tol": TOL}
  for p in ("a", "b"):
    best = rs.best_rows(rows, p)
    if not best:
      continue
    for r in best:
      k = int(r["rank"])
      table.append({"protocol": p, "head": "lowrank", "rank": k, "w_error": float(curve[k]),
                    "eval_loss": float(r["eval_loss"]), "eval_acc": float(r["eval_acc"]),
                    "lr": float(r["lr"]), "rel_excess": float(r["eval_loss"]) / lf - 1.0})
    ranks = [int(r["rank"]) for r in best]
    losses = [float(r["eval_loss"]) for r in best]
    rstar = threshold_rank(ranks, losses, lf)
    lower = [k for k in ranks if rstar is not None and k < rstar]
    rminus = max(lower) if lower else None
    w_star = float(curve[rstar]) if rstar is not None else None
    w_minus = float(curve[rminus]) if rminus is not None else None
    consistent = (w_star is not None and w_minus is not None and w_star <= THRESHOLD <= w_minus)
    summary[p] = {"r_star": rstar, "w_error_r_star": w_star, "r_minus": rminus,
                  "w_error_r_minus": w_minus, "consistent_with_0.6": bool(consistent)}
  write_csv(out / "werror_loss.csv", table)
  atomic_write_json(out / "summary.json", summary)
  return summary


def draw(out: Path) -> Path:
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  rows = read_csv(out / "werror_loss.csv")
  curve = read_csv(out / "werror_curve.csv")
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  ax = axes[0]
  ax.plot([c["d"] for c in curve[1:]], [c["w_error"] for c in curve[1:]], "-", color="k")
  ax.axhline(THRESHOLD, color="r", ls=":", label=f"W-error = {THRESHOLD}")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("rank d of the approximation")
  ax.set_ylabel("W-error(d) of the full-rank head")
  ax.legend(fontsize=8)
  ax = axes[1]
  full = [r for r in rows if r["protocol"] == "full"][0]
  for p, fmt, name in (("a", "o-", "(a) frozen trunk"), ("b", "s-", "(b) from scratch")):
    sel = sorted((r for r in rows if r["protocol"] == p), key=lambda r: r["rank"])
    if not sel:
      continue
    ax.plot([r["w_error"] for r in sel], [r["eval_loss"] for r in sel], fmt, label=name)
    for r in sel:
      ax.annotate(f"r={int(r['rank'])}", (r["w_error"], r["eval_loss"]), fontsize=6,
                  xytext=(3, 3), textcoords="offset points")
  ax.axhline(full["eval_loss"], color="k", ls="--", lw=1, label="dense head")
  ax.axvline(THRESHOLD, color="r", ls=":", label="0.6 (Godey Fig. 8)")
  ax.set_xlabel("W-error(r) of the full-rank head")
  ax.set_ylabel("validation loss of the rank-r run (nats)")
  ax.legend(fontsize=7)
  fig.suptitle("Loss vs W-error (Godey Fig. 8 analogue)")
  fig.tight_layout()
  path = out / FIGURE
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def run(out: Path, preset: str, head_rank_dir_: str = "", data: str = "") -> None:
  """Compute from the head-rank sweep (trained first with ``preset`` if it is not finished)."""
  out = Path(out)
  hr = head_rank_dir(out, head_rank_dir_)
  if not _finished(hr):
    from experiments import head_rank  # noqa: PLC0415

    print(f"[{NAME}] {hr} holds no finished head-rank sweep: running it ({preset})",
          file=sys.stderr, flush=True)
    head_rank.run(hr, preset, data)
  compute(out, hr)
  draw(out)


def _f(x, nd=3) -> str:
  return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.{nd}f}"


def report_section(out: Path, rel: str) -> str:
  from sbjax.analysis.table import read_csv  # noqa: PLC0415

  out = Path(out)
  rows = read_csv(out / "werror_loss.csv")
  s = json.loads((out / "summary.json").read_text())
  lines = [f"## {NAME}", "", f"![loss vs W-error]({rel}/{FIGURE})", "",
           "| protocol | r | W-error(r) | val loss | loss / full - 1 |", "|---|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: (r["protocol"], r["rank"])):
    lines.append(f"| {r['protocol']} | {int(r['rank'])} | {_f(r['w_error'])} | "
                 f"{_f(r['eval_loss'], 4)} | {100 * r['rel_excess']:+.1f}% |")
  found = [f"The full-rank head reaches W-error <= {THRESHOLD} at rank "
           f"{s['rank_at_werror_0.6']} of {s['n_sigma']}."]
  verdicts = []
  for p, name in (("a", "frozen trunk (a)"), ("b", "from scratch (b)")):
    if p not in s:
      continue
    x = s[p]
    if x["r_star"] is None:
      found.append(f"{name}: no rank comes within {100 * TOL:.0f}% of the full-rank loss.")
      verdicts.append(False)
      continue
    minus = (f"the next smaller rank r={x['r_minus']} has W-error {_f(x['w_error_r_minus'])}"
             if x["r_minus"] is not None else "no smaller rank was trained")
    found.append(f"{name}: the smallest rank within {100 * TOL:.0f}% of the full-rank loss is "
                 f"r*={x['r_star']} (W-error {_f(x['w_error_r_star'])}); {minus}.")
    verdicts.append(x["consistent_with_0.6"])
  agree = "yes" if verdicts and all(verdicts) else ("partly" if any(verdicts) else "no")
  lines += ["", PAPER, "", "sbjax here: " + " ".join(found),
            f"Consistent with the 0.6 threshold (W-error(r*) <= 0.6 <= W-error(r-)): {agree}."]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  out = Path(OUT.value)
  run(out, PRESET.value, HR_DIR.value, DATA.value)
  print(json.dumps({"out": str(out), "csv": str(out / "werror_loss.csv"),
                    "figure": str(out / FIGURE),
                    "summary": json.loads((out / "summary.json").read_text())}))


if __name__ == "__main__":
  PRESET = flags.DEFINE_enum("preset", "cpu", ["quick", "cpu", "tpu"],
                             "preset of the head-rank sweep, if it has to be run")
  OUT = flags.DEFINE_string("out", "out/werror_loss", "output directory")
  HR_DIR = flags.DEFINE_string("head_rank_dir", "",
                               "the head_rank output (default OUT/../head_rank)")
  DATA = flags.DEFINE_string("data", "", "corpus for the head-rank sweep if it has to be run")
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run(main)
