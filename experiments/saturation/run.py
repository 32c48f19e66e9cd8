"""Train (or skip) every width, analyse every run, then write the CSVs (``measure.py``)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from .measure import summarize
from .presets import Preset, get_preset
from .timings import merge as merge_timings
from .windows import validation_windows, window_losses
from ..shared import RunsProgress, config_from, upath, write_json
from sbjax import overrides
from sbjax.analysis import Settings, analyze_run
from sbjax.config import Config, DataConfig
from sbjax.data import make_dataset
from sbjax.data.dataset import local_data_dir
from sbjax.train import train_once
from sbjax.studies.corpus import corpus_overrides
from sbjax.train.done import finished


def data_config(p: Preset, out: Path, data: str | None) -> DataConfig:
  """The corpus of the preset: a text directory (``data`` or the packaged sample corpus) with
  the preset's vocabulary, or a TFDS name (``data`` overrides the preset's)."""
  o = p.overrides  # the data.* overrides; the base preset's data section is not used
  keep = {k: o[k] for k in ("data.vocab_size", "data.tfds_name", "data.max_docs") if k in o}
  # the token caches, shared by the runs, in a local folder (a gs:// out: the local data cache)
  where = None if o["data.source"] == "tfds" else local_data_dir(out) / "data" / "tfds"
  return overrides.apply(Config(), {**keep, **corpus_overrides(o["data.source"], data, where)}).data


def run_configs(p: Preset, data_cfg: DataConfig) -> list[tuple[int, Config]]:
  """(width, Config) of every run; validated (a bad preset fails before training)."""
  out = []
  for w in p.knobs.widths:
    out.append((int(w), config_from(p.base, {
        **p.overrides, "data": dataclasses.asdict(data_cfg), "model.d_model": int(w),
        "model.n_heads": max(1, int(w) // p.knobs.head_dim), "name": f"saturation-d{w}"})))
  return out


def analysis_settings(p: Preset, width: int) -> Settings:
  k = p.knobs
  dims = tuple(d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if d <= width)
  return Settings(groups=("loss", "anisotropy", "spectrum"), eval_sequences=k.eval_sequences,
                  cka_sequences=k.eval_sequences, anisotropy_tokens=k.anisotropy_tokens,
                  w_error_dims=dims, batch_sequences=min(32, k.eval_sequences), progress=False,
                  figures=False)  # the report draws every width together


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  """Train (or skip) every width, analyse every run, fit; see the package doc.

  ``preset``: a name of PRESETS or a Preset."""
  p = preset if isinstance(preset, Preset) else get_preset(preset)
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  dc = data_config(p, out, data)
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  ds = make_dataset(dc, seq_len=seq_len, global_batch_size=batch, seed=0,
                    workdir=str(out / "data"), process_index=0, process_count=1)
  if ds.tokenizer_path:  # the runs' configs name the shared tokenizer (for re-analysis)
    dc = dc.replace_options(tokenizer=str(ds.tokenizer_path))
  cfgs = run_configs(p, dc)
  windows = validation_windows(ds, p.knobs.eval_sequences)  # the rise/gap bootstrap units
  timings, trained_now = {}, set()
  progress = RunsProgress(len(cfgs), "saturation", disable=not verbose)
  for w, cfg in cfgs:
    wd = out / "runs" / f"d{w}"
    progress.start(f"d={w} ({cfg.train.steps} steps)")
    trained = finished(wd) is None
    t1 = time.perf_counter()
    train_once(cfg, wd, dataset=ds, quiet=True)
    t2 = time.perf_counter()
    analyze_run(wd, analysis_settings(p, w), dataset=ds)
    window_losses(wd, windows)
    timings[w] = {"train_s": round(t2 - t1, 1), "analyze_s": round(time.perf_counter() - t2, 1)}
    if trained:
      trained_now.add(w)
    progress.finish(trained)
  progress.close()
  summarize(out, p.knobs)
  steps = p.overrides["train.steps"]
  meta = out / "saturation_meta.json"  # a rerun keeps the first real times (timings.py)
  times = merge_timings(json.loads(meta.read_text()) if meta.exists() else {}, timings,
                        trained_now, time.perf_counter() - t0)
  write_json(meta, {
      "preset": preset if isinstance(preset, str) else "custom", "base": p.base,
      "overrides": p.overrides, "knobs": dataclasses.asdict(p.knobs),
      "data": {"source": dc.source,
               "path": getattr(dc.options, "path", "") or getattr(dc.options, "name", ""),
               "vocab_size": ds.vocab_size, "train_tokens": int(len(ds.train_tokens)),
               "val_tokens": int(len(ds.val_tokens)),
               "epochs": steps * batch * seq_len / max(1, len(ds.train_tokens))},
      **times})
