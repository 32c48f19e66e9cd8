"""Run the planted arms: train (or skip) every arm on one fresh-token stream, measure every
checkpoint on the fixed validation windows, compute the exact floors, write the CSVs.

Outputs in OUT: ``runs/<arm>/`` (workdirs, with ``planted_windows.npz``: steps, L[K, W]),
``planted_checkpoints.csv`` (one row per arm and checkpoint), ``planted_arms.csv`` (the
per-arm readout, ``planted_measure.arm_summary``), ``planted_floor.csv``,
``planted_meta.json`` (preset, language, account, timings).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

from . import planted_measure as pm
from .windows import validation_windows
from .planted_presets import arm_config, get_planted_preset, knobs_record
from ..shared import RunsProgress, read_rows, write_json, write_rows
from sbjax.analysis.table import atomic_write_bytes
from sbjax.data import make_dataset
from sbjax.studies.floor import floor_curve
from sbjax.train import read_metrics, train_once
from sbjax.train.done import finished


def _save_windows(path: Path, steps, losses) -> None:
  buf = io.BytesIO()
  np.savez(buf, steps=np.asarray(steps, np.int64), expected_loss_KxW=losses)
  atomic_write_bytes(path, buf.getvalue())


def _floors(lang, p, out: Path) -> dict:
  """floor(d) − H for every arm width: {d: row of planted_floor.csv}; kept in OUT and reused
  while the language, the widths and the optimiser settings are the same."""
  k = p.knobs
  key = json.dumps({"lang": lang.info(), "ranks": sorted({a.d for a in k.arms}),
                    "gtol": k.floor_gtol, "max_iter": k.floor_max_iter}, sort_keys=True)
  path, kpath = out / "planted_floor.csv", out / "planted_floor.key"
  if path.exists() and kpath.exists() and kpath.read_text() == key:
    return {int(r["rank"]): r for r in read_rows(path)}
  res = floor_curve(lang, sorted({a.d for a in k.arms}), gtol=k.floor_gtol,
                    max_iter=k.floor_max_iter, restarts=2, require_converged=False)
  rows = {r.rank: r.row() for r in res}
  write_rows(path, [rows[d] for d in sorted(rows)])
  kpath.write_text(key)
  return rows


def run_planted(out: Path, preset, verbose: bool = True) -> dict:
  """Train, measure and summarise every arm of a planted preset (a name or a Preset)."""
  p = get_planted_preset(preset)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  cfgs = [(a, arm_config(p, a)) for a in p.knobs.arms]  # all validated before any training
  c0 = cfgs[0][1]
  ds = make_dataset(c0.data, seq_len=c0.train.seq_len, global_batch_size=c0.train.batch_size,
                    seed=c0.train.data_seed, workdir=None, process_index=0, process_count=1)
  lang = ds.planted
  windows = validation_windows(ds, p.knobs.val_windows)
  t_floor = time.perf_counter()
  floors = _floors(lang, p, out)
  timings = {"data_and_floor_s": round(time.perf_counter() - t0, 1),
             "floor_s": round(time.perf_counter() - t_floor, 1)}
  progress = RunsProgress(len(cfgs), "saturation-planted", disable=not verbose)
  arms, ck_rows = [], []
  for arm, cfg in cfgs:
    wd = out / "runs" / arm.name
    progress.start(f"{arm.name} ({cfg.train.steps} steps)")
    trained = finished(wd) is None
    t1 = time.perf_counter()
    train_once(cfg, wd, dataset=ds, quiet=True)
    t2 = time.perf_counter()
    rows, losses = pm.measure_arm(wd, windows, lang)
    _save_windows(wd / "planted_windows.npz", [r["step"] for r in rows], losses)
    train_recs = [r for r in read_metrics(wd) if "loss" in r]
    fl = floors[arm.d]
    arms.append(pm.arm_summary(rows, losses, train_recs, cfg, p.knobs, float(fl["floor"]),
                               float(fl["H"])))
    ck_rows += [{"arm": arm.name, "d": arm.d, "weight_decay": arm.weight_decay,
                 "dtype": arm.dtype, **r} for r in rows]
    timings[arm.name] = {"train_s": round(t2 - t1, 1),
                         "measure_s": round(time.perf_counter() - t2, 1)}
    progress.finish(trained)
  progress.close()
  write_rows(out / "planted_checkpoints.csv", ck_rows)
  write_rows(out / "planted_arms.csv", arms)
  meta = {"preset": preset if isinstance(preset, str) else "custom",
          "knobs": knobs_record(p, c0), "language": lang.info(), "steps": c0.train.steps,
          "tokens_per_arm": c0.train.steps * c0.train.batch_size * c0.train.seq_len,
          "account": pm.account(arms), "timings": timings,
          "seconds": round(time.perf_counter() - t0, 1)}
  write_json(out / "planted_meta.json", meta)
  return meta
