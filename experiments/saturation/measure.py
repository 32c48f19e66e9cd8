"""From the analysed runs to the CSVs: one row per width (losses over checkpoints, the
late-rise tests, head spectrum at best/final), the two scaling fits and the training loss."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from experiments.saturation.presets import Knobs
from experiments.shared import read_rows, write_rows
from sbjax import checkpoint as ckpt
from sbjax.model import Model, non_embedding_params
from sbjax.studies import scaling
from sbjax.train import read_metrics

FITS = ("final", "best")


def detect_rise(steps, loss, tol: float) -> dict:
  """Late-rise test of one loss curve over checkpoints: best = argmin, rise = final - best,
  late_rise = rise > tol (the final checkpoint is the one with the largest step)."""
  steps, loss = np.asarray(steps), np.asarray(loss, np.float64)
  ok = np.isfinite(loss)
  if not ok.any():
    raise ValueError("no finite loss to test for a late rise (the run diverged)")
  steps, loss = steps[ok], loss[ok]
  ib, i_f = int(np.argmin(loss)), int(np.argmax(steps))
  rise = float(loss[i_f] - loss[ib])
  return {"best_step": int(steps[ib]), "best": float(loss[ib]), "final_step": int(steps[i_f]),
          "final": float(loss[i_f]), "rise": rise, "late_rise": bool(rise > tol),
          "i_best": ib, "i_final": i_f}


def smooth(x: np.ndarray, k: int) -> np.ndarray:
  """Moving average over k values ('valid' part: len(x) - k + 1 values)."""
  x = np.asarray(x, np.float64)
  if x.size == 0 or k <= 1:
    return x
  k = min(k, x.size)
  return np.convolve(x, np.ones(k) / k, mode="valid")


def train_losses(wd: Path) -> list[dict]:
  """(step, loss) of every training log record of a run (metrics.jsonl)."""
  return [{"step": int(r["step"]), "loss": float(r["loss"])} for r in read_metrics(wd)
          if "loss" in r]


def run_summary(wd: Path, k: Knobs) -> dict:
  """One width's row: losses over checkpoints, late-rise tests, spectrum at best/final."""
  cfg = ckpt.load_config(wd)
  rows = [r for r in read_rows(wd / "analysis" / "metrics.csv") if math.isfinite(r["eval_loss"])]
  if not rows:
    raise ValueError(f"{wd}: no finite eval_loss in the analysis; the run diverged")
  ev = detect_rise([r["step"] for r in rows], [r["eval_loss"] for r in rows], k.rise_tol)
  ib, i_f = ev["i_best"], ev["i_final"]
  trs = smooth([r["loss"] for r in train_losses(wd)], k.smooth)
  train_rise = float(trs[-1] - trs.min()) if trs.size else math.nan
  model = Model(cfg.model)
  return {
      "width": cfg.model.d_model, "n_layers": cfg.model.n_layers,
      "n_nonembedding": non_embedding_params(cfg.model),
      "n_params": model.param_count(model.abstract_params()),
      "vocab_size": cfg.model.vocab_size, "steps": ev["final_step"],
      "final_eval_loss": ev["final"], "best_eval_loss": ev["best"],
      "best_step": ev["best_step"], "rise": ev["rise"], "late_rise": int(ev["late_rise"]),
      "train_rise": train_rise, "train_late_rise": int(train_rise > k.rise_tol),
      "kl_best": float(rows[ib].get("head_kl_uniform", math.nan)),
      "kl_final": float(rows[i_f].get("head_kl_uniform", math.nan)),
      "anisotropy_best": float(rows[ib].get("anisotropy_last", math.nan)),
      "anisotropy_final": float(rows[i_f].get("anisotropy_last", math.nan)),
  }


def fit_rows(rows: list[dict], fit_min_width: int) -> tuple[list[dict], list[dict]]:
  """The scaling law L = A / N^alpha + E fitted on the widths >= fit_min_width, once on the
  final and once on the best eval losses (N = non-embedding parameters). Adds ``in_fit``,
  ``pred_<fit>`` and ``gap_<fit>_pct`` = 100 (L - L_fit(N)) / L_fit(N) to every row; returns
  (rows, one row per fit). Too few widths in the fit give a NaN fit (with a warning)."""
  n = np.array([r["n_nonembedding"] for r in rows], np.float64)
  infit = np.array([r["width"] >= fit_min_width for r in rows])
  fits = {}
  for key in FITS:
    y = np.array([r[f"{key}_eval_loss"] for r in rows])
    try:
      fits[key] = scaling.fit_power_law(n[infit], y[infit])
    except ValueError as e:
      logging.warning("saturation: no %s-loss fit: %s", key, e)
      fits[key] = scaling.nan_fit(int(infit.sum()))
  for r, f in zip(rows, infit):
    r["in_fit"] = int(f)
    for key in FITS:
      r[f"pred_{key}"] = float(fits[key].predict(r["n_nonembedding"]))
      r[f"gap_{key}_pct"] = float(fits[key].gap_pct(r[f"{key}_eval_loss"], r["n_nonembedding"]))
  widths = "+".join(str(r["width"]) for r in rows if r["in_fit"])
  return rows, [{"step": i, "fit_on": key, **fits[key].to_dict(), "widths": widths}
                for i, key in enumerate(FITS)]


def summarize(out: Path, k: Knobs) -> None:
  """saturation_runs.csv, saturation_fit.csv and saturation_train_loss.csv from the runs."""
  out = Path(out)
  wds = sorted((d for d in (out / "runs").iterdir() if (d / "analysis" / "metrics.csv").exists()),
               key=lambda d: int(d.name[1:]))
  if not wds:
    raise FileNotFoundError(f"no analysed runs in {out / 'runs'}; run the experiment first")
  rows, fits = fit_rows([run_summary(wd, k) for wd in wds], k.fit_min_width)
  write_rows(out / "saturation_runs.csv", rows)
  write_rows(out / "saturation_fit.csv", fits)
  write_rows(out / "saturation_train_loss.csv",
             [{"width": r["width"], **x} for wd, r in zip(wds, rows) for x in train_losses(wd)])
