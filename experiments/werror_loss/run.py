"""werror_loss's run: the W-error curve of the sweep's full-rank head and the best-LR rank-r
runs against it (werror_loss.csv, werror_curve.csv, summary.json), then the figure."""

from __future__ import annotations

import sys
from pathlib import Path

from ..shared import load_np, workdir_lock, text_corpus, upath, write_json, write_rows
from . import report
from sbjax.studies.werror import rank_at, threshold_rank, w_error_curve
from .presets import Knobs, get_preset
from sbjax.studies import rank_sweep as rs
from sbjax.studies.head_rank import train_sweep

NAME = "werror_loss"


def head_rank_dir(out: Path, given: str = "") -> Path:
  return upath(given) if given else upath(out).parent / "head_rank"


def sweep_written(hr: Path) -> bool:
  """Whether ``hr`` holds a head-rank sweep's outputs (its runs are then not retrained, whatever
  preset wrote them; the runs themselves use ``sbjax.train.done``)."""
  return (hr / "plan.json").is_file() and (hr / rs.FULL_HEAD).is_file()


def _protocol(rows, curve, lf: float, p: str, k: Knobs) -> tuple[list, dict]:
  """The table rows and the summary record of protocol ``p``."""
  best = rs.best_rows(rows, p)
  table = [{"protocol": p, "head": "lowrank", "rank": int(r["rank"]),
            "w_error": float(curve[int(r["rank"])]), "eval_loss": float(r["eval_loss"]),
            "eval_acc": float(r["eval_acc"]), "lr": float(r["lr"]),
            "rel_excess": float(r["eval_loss"]) / lf - 1.0} for r in best]
  ranks = [int(r["rank"]) for r in best]
  rstar = threshold_rank(ranks, [float(r["eval_loss"]) for r in best], lf, k.tol)
  lower = [r for r in ranks if rstar is not None and r < rstar]
  rminus = max(lower) if lower else None
  w_star = float(curve[rstar]) if rstar is not None else None
  w_minus = float(curve[rminus]) if rminus is not None else None
  consistent = w_star is not None and w_minus is not None and w_star <= k.threshold <= w_minus
  return table, {"r_star": rstar, "w_error_r_star": w_star, "r_minus": rminus,
                 "w_error_r_minus": w_minus, "consistent_with_0.6": bool(consistent)}


def compute(out: Path, hr: Path, knobs: Knobs = Knobs()) -> dict:
  """Writes the CSVs and summary.json of OUT from the sweep in ``hr``; returns the summary."""
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  rows = rs.read_rows(hr)
  sigma, curve = w_error_curve(load_np(hr / rs.FULL_HEAD, allow_pickle=False))
  write_rows(out / report.CURVE_CSV, [{"d": d, "w_error": float(v)} for d, v in enumerate(curve)])
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])][0]
  lf = float(full["eval_loss"])
  table = [{"protocol": "full", "head": "dense", "rank": int(full["rank"]), "w_error": 0.0,
            "eval_loss": lf, "eval_acc": float(full["eval_acc"]), "lr": float(full["lr"]),
            "rel_excess": 0.0}]
  summary = {"full_loss": lf, "head_rank_dir": str(hr), "n_sigma": len(sigma),
             "rank_at_werror_0.6": rank_at(curve, knobs.threshold), "tol": knobs.tol,
             "threshold": knobs.threshold}
  for p in ("a", "b"):
    if rs.best_rows(rows, p):
      t, summary[p] = _protocol(rows, curve, lf, p, knobs)
      table += t
  write_rows(out / report.CSV, table)
  write_json(out / report.SUMMARY, summary)
  return summary


def run(out: Path, preset, *, data: str | None = None, head_rank_dir_: str = "",
        verbose: bool = True) -> None:
  """Compute from the head-rank sweep (trained first with ``preset`` if it is not there),
  holding the sweep folder's lock (``workdir_lock``: ``HR/LOCK``) while it is read or trained, so
  no other call writes it meanwhile; this call, whatever calls it (``__main__``, or
  ``experiments.reproduce``, which holds only OUT and OUT/werror_loss). A busy folder stops the
  call with one line naming the holder and the option that chose the folder."""
  out = upath(out)
  p = get_preset(preset)
  hr = head_rank_dir(out, head_rank_dir_)
  with workdir_lock(hr):
    if not sweep_written(hr):
      print(f"[{NAME}] {hr} holds no finished head-rank sweep: running it ({preset})",
            file=sys.stderr, flush=True)
      train_sweep(hr, preset, str(text_corpus(data)), verbose=verbose)
    compute(out, hr, p.knobs)
  report.draw(out)
