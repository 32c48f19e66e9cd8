"""Run the planted arms: train (or skip) every arm on one fresh-token stream, measure every
checkpoint on the fixed validation windows, compute the exact floors, write the CSVs.

Outputs in OUT: ``runs/<arm>/`` (workdirs, with ``planted_windows.npz``: steps, L[K, W]),
``planted_checkpoints.csv`` (one row per arm and checkpoint), ``planted_arms.csv`` (the
per-arm readout, ``planted_measure.arm_summary``, with the arm's seed, vocab and zipf), the
floors ``planted_floor.csv`` (the preset's language) and ``planted_floor<lang_tag>.csv`` (an
arm's own language, ``Arm.lang``), ``planted_meta.json`` (preset, language, languages,
account, timings). An arm with its own language or seed gets its own dataset and windows.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

from . import planted_measure as pm
from .windows import validation_windows
from .planted_presets import arm_config, get_planted_preset, knobs_record, lang_tag
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


def _floors(lang, p, ranks, out: Path, tag: str = "") -> dict:
  """floor(d) − H for every arm width of a language: {d: row of planted_floor<tag>.csv}
  (tag: ``lang_tag`` of an arm's own language, "" for the preset's); kept in OUT and reused
  while the language, the widths and the optimiser settings are the same."""
  k = p.knobs
  key = json.dumps({"lang": lang.info(), "ranks": sorted(ranks),
                    "gtol": k.floor_gtol, "max_iter": k.floor_max_iter}, sort_keys=True)
  path, kpath = out / f"planted_floor{tag}.csv", out / f"planted_floor{tag}.key"
  if path.exists() and kpath.exists() and kpath.read_text() == key:
    return {int(r["rank"]): r for r in read_rows(path)}
  res = floor_curve(lang, sorted(ranks), gtol=k.floor_gtol,
                    max_iter=k.floor_max_iter, restarts=2, require_converged=False)
  rows = {r.rank: r.row() for r in res}
  write_rows(path, [rows[d] for d in sorted(rows)])
  kpath.write_text(key)
  return rows


class _Languages:
  """Per arm language (``Arm.lang``): its dataset per data seed, its fixed validation windows
  (independent of the data seed) and its floors, each built once, when first needed (the
  floors after the language's first arm has trained)."""

  def __init__(self, p, out: Path):
    self.p, self.out, self.ds, self.windows, self.floors, self.floor_s = p, out, {}, {}, {}, 0.0

  def dataset(self, arm, cfg):
    key = (arm.lang, cfg.train.data_seed)
    if key not in self.ds:
      self.ds[key] = make_dataset(cfg.data, seq_len=cfg.train.seq_len,
                                  global_batch_size=cfg.train.batch_size,
                                  seed=cfg.train.data_seed, workdir=None, process_index=0,
                                  process_count=1)
    return self.ds[key]

  def language(self, arm, cfg):
    """(dataset, language, validation windows) of the arm."""
    ds = self.dataset(arm, cfg)
    if arm.lang not in self.windows:
      self.windows[arm.lang] = validation_windows(ds, self.p.knobs.val_windows)
    return ds, ds.planted, self.windows[arm.lang]

  def floor(self, arm, lang) -> dict:
    """The arm's planted_floor row (the language's floors fitted at its first arm's end)."""
    if arm.lang not in self.floors:
      t = time.perf_counter()
      ranks = {a.d for a in self.p.knobs.arms if a.lang == arm.lang}
      self.floors[arm.lang] = _floors(lang, self.p, ranks, self.out, lang_tag(arm.lang))
      self.floor_s += time.perf_counter() - t
    return self.floors[arm.lang][arm.d]


def _arm_rows(arm, cfg, wd: Path, windows, lang, fl: dict, knobs) -> tuple[dict, list[dict]]:
  """(the arm's planted_arms.csv row, its planted_checkpoints.csv rows) after training."""
  rows, losses = pm.measure_arm(wd, windows, lang)
  _save_windows(wd / "planted_windows.npz", [r["step"] for r in rows], losses)
  train_recs = [r for r in read_metrics(wd) if "loss" in r]
  who = {"arm": arm.name, "seed": arm.seed, "vocab": lang.vocab, "zipf": lang.zipf}
  summary = pm.arm_summary(rows, losses, train_recs, cfg, knobs, float(fl["floor"]),
                           float(fl["H"]))
  ck = [{"arm": arm.name, "d": arm.d, "weight_decay": arm.weight_decay, "dtype": arm.dtype,
         "seed": arm.seed, **r} for r in rows]
  return {**summary, **who}, ck


def run_planted(out: Path, preset, verbose: bool = True) -> dict:
  """Train, measure and summarise every arm of a planted preset (a name or a Preset);
  planted_arms.csv and planted_checkpoints.csv are rewritten after every arm."""
  p = get_planted_preset(preset)
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  cfgs = [(a, arm_config(p, a)) for a in p.knobs.arms]  # all validated before any training
  c0 = cfgs[0][1]
  langs = _Languages(p, out)
  timings = {}
  progress = RunsProgress(len(cfgs), "saturation-planted", disable=not verbose)
  arms, ck_rows = [], []
  for arm, cfg in cfgs:
    ds, lang, windows = langs.language(arm, cfg)
    wd = out / "runs" / arm.name
    progress.start(f"{arm.name} ({cfg.train.steps} steps)")
    trained = finished(wd) is None
    t1 = time.perf_counter()
    train_once(cfg, wd, dataset=ds, quiet=True)
    t2 = time.perf_counter()
    row, ck = _arm_rows(arm, cfg, wd, windows, lang, langs.floor(arm, lang), p.knobs)
    arms.append(row)
    ck_rows += ck
    write_rows(out / "planted_checkpoints.csv", ck_rows)
    write_rows(out / "planted_arms.csv", arms)
    timings[arm.name] = {"train_s": round(t2 - t1, 1),
                         "measure_s": round(time.perf_counter() - t2, 1)}
    progress.finish(trained)
  progress.close()
  lang0 = langs.language(cfgs[0][0], c0)[1]
  timings["floor_s"] = round(langs.floor_s, 1)
  meta = {"preset": preset if isinstance(preset, str) else "custom",
          "knobs": knobs_record(p, c0), "language": lang0.info(), "steps": c0.train.steps,
          "languages": {lang_tag(a.lang): langs.language(a, c)[1].info() for a, c in cfgs},
          "tokens_per_arm": c0.train.steps * c0.train.batch_size * c0.train.seq_len,
          "account": pm.account(arms), "timings": timings,
          "seconds": round(time.perf_counter() - t0, 1)}
  write_json(out / "planted_meta.json", meta)
  return meta
