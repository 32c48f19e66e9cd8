"""From the analysed runs to the CSVs: one row per width (losses over checkpoints, the
late-rise tests, head spectrum at best/final), the scaling fits and the training loss.

Two late-rise tests: the naive one (``detect_rise``: final − best > rise_tol, columns
``rise``, ``late_rise``), which fires on batch noise, and the paired-bootstrap statistic of
``sbjax.studies.rise`` on the fixed validation windows (``windows.npz``; columns
``rise_stat``, ``rise_ci_lo``, ``rise_ci_hi``, ``rise_verdict``, ``rise_onset_step``;
``train_rise_stat``: the same statistic of the train loss binned between checkpoints).
N is reported without the head (``n_nonembedding``, the fits ``final`` and ``best``) and
with it (``n_with_head``, the fit ``final_with_head``); every width gets a paired-bootstrap CI
of its final gap under both counts (``gap_final_ci_lo``/``hi`` and
``gap_final_with_head_ci_lo``/``hi``, ``scaling.bootstrap_gap``)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from .presets import Knobs
from .windows import FILE as WINDOWS
from ..shared import load_np, read_rows, upath, write_rows
from sbjax import checkpoint as ckpt
from sbjax import optim
from sbjax.heads import head_param_count
from sbjax.model import Model, non_embedding_params
from sbjax.studies import rise as rise_lib
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
      "n_with_head": non_embedding_params(cfg.model) + head_param_count(cfg.model),
      "n_params": model.param_count(model.abstract_params()),
      "vocab_size": cfg.model.vocab_size, "steps": ev["final_step"],
      "gamma_total": optim.gamma_total(cfg.train),
      "final_eval_loss": ev["final"], "best_eval_loss": ev["best"],
      "best_step": ev["best_step"], "rise": ev["rise"], "late_rise": int(ev["late_rise"]),
      "train_rise": train_rise, "train_late_rise": int(train_rise > k.rise_tol),
      "kl_best": float(rows[ib].get("head_kl_uniform", math.nan)),
      "kl_final": float(rows[i_f].get("head_kl_uniform", math.nan)),
      "anisotropy_best": float(rows[ib].get("anisotropy_last", math.nan)),
      "anisotropy_final": float(rows[i_f].get("anisotropy_last", math.nan)),
      **paired_rise(wd, cfg.train.steps, k),
  }


def paired_rise(wd: Path, total: int, k: Knobs) -> dict:
  """The paired-bootstrap rise of the window losses (NaN columns without windows.npz or
  without a checkpoint after rise_after of training)."""
  out = {"rise_stat": math.nan, "rise_ci_lo": math.nan, "rise_ci_hi": math.nan,
         "rise_verdict": "n/a", "rise_onset_step": None, "train_rise_stat": math.nan}
  if not (wd / WINDOWS).exists():
    return out
  with load_np(wd / WINDOWS) as z:
    steps, losses = z["steps"], z["loss_KxW"]
  if steps[-1] < k.rise_after * total:
    return out
  r = rise_lib.rise_test(steps, losses, total, threshold=k.rise_threshold, after=k.rise_after,
                         n_boot=k.n_boot)
  out.update(rise_stat=r["rise"], rise_ci_lo=r["ci_lo"], rise_ci_hi=r["ci_hi"],
             rise_verdict=r["verdict"], rise_onset_step=r["onset_step"])
  tr = train_losses(wd)
  b = rise_lib.binned_means([x["step"] + 1 for x in tr], [x["loss"] for x in tr], steps)
  ok = np.isfinite(b)
  if ok.any() and steps[ok][-1] >= k.rise_after * total:
    out["train_rise_stat"] = float(rise_lib.rise_statistic(steps[ok], b[ok], total, k.rise_after))
  return out


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
  out = [{"step": i, "fit_on": key, **fits[key].to_dict(), "widths": widths}
         for i, key in enumerate(FITS)]
  if all("n_with_head" in r for r in rows):  # N with the head's parameters too
    nh = np.array([r["n_with_head"] for r in rows], np.float64)
    y = np.array([r["final_eval_loss"] for r in rows])
    try:
      fh = scaling.fit_power_law(nh[infit], y[infit])
    except ValueError:
      fh = scaling.nan_fit(int(infit.sum()))
    for r in rows:
      r["gap_final_with_head_pct"] = float(fh.gap_pct(r["final_eval_loss"], r["n_with_head"]))
    out.append({"step": len(out), "fit_on": "final_with_head", **fh.to_dict(), "widths": widths})
  return rows, out


# the gap CIs: (fit, N column) for N counted without the head (the fit ``final``) and with it
# (``final_with_head``); both resample the same windows (one seed), so they are paired
GAP_FITS = (("final", "n_nonembedding"), ("final_with_head", "n_with_head"))


def gap_cis(rows: list[dict], wds: list[Path], k: Knobs) -> None:
  """gap_<fit>_ci_lo/hi for both N counts (``GAP_FITS``): the paired-bootstrap CI of every
  width's final gap (``scaling.bootstrap_gap``, the law refitted on the widths in the fit each
  draw). In place; NaN when a width has no windows.npz or the fit is undefined."""
  for r in rows:
    for fit, _ in GAP_FITS:
      r[f"gap_{fit}_ci_lo"] = r[f"gap_{fit}_ci_hi"] = math.nan
  finals = []
  for wd in wds:
    if not (wd / WINDOWS).exists():
      return
    with load_np(wd / WINDOWS) as z:
      finals.append(z["loss_KxW"][-1])
  infit = np.array([bool(r["in_fit"]) for r in rows])
  if infit.sum() < 3:
    return
  for fit, col in GAP_FITS:
    if not all(col in r for r in rows):
      continue
    g = scaling.bootstrap_gap([r[col] for r in rows], np.stack(finals), infit, n_boot=k.n_boot)
    for r, lo, hi in zip(rows, g["lo"], g["hi"]):
      r[f"gap_{fit}_ci_lo"], r[f"gap_{fit}_ci_hi"] = float(lo), float(hi)


def summarize(out: Path, k: Knobs) -> None:
  """saturation_runs.csv, saturation_fit.csv and saturation_train_loss.csv from the runs."""
  out = upath(out)
  wds = sorted((d for d in (out / "runs").iterdir() if (d / "analysis" / "metrics.csv").exists()),
               key=lambda d: int(d.name[1:]))
  if not wds:
    raise FileNotFoundError(f"no analysed runs in {out / 'runs'}; run the experiment first")
  rows, fits = fit_rows([run_summary(wd, k) for wd in wds], k.fit_min_width)
  gap_cis(rows, wds, k)
  write_rows(out / "saturation_runs.csv", rows)
  write_rows(out / "saturation_fit.csv", fits)
  write_rows(out / "saturation_train_loss.csv",
             [{"width": r["width"], **x} for wd, r in zip(wds, rows) for x in train_losses(wd)])
