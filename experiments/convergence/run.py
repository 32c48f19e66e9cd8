"""Train one model per width (or read imported series), measure every checkpoint on one
fixed batch and on the disjoint probe batches (``probes.py``), then summarise into the CSVs
(``summary.py``; stabilisation at several levels on every probe: ``levels.py``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np

from . import levels, probes
from .presets import Preset, get_preset
from .series import series_sources
from .summary import FRAC, summarise
from ..shared import RunsProgress, config_from, upath, write_json, write_rows
from sbjax import optim, overrides
from sbjax.config import Config, DataConfig
from sbjax.data import make_dataset
from sbjax.data import sources as data_sources
from sbjax.studies import convergence as conv
from sbjax.studies.corpus import corpus_overrides
from sbjax.train import train_once
from sbjax.train.done import finished

log = logging.getLogger("sbjax")
TEXT_KEYS = ("data.options.vocab_size", "data.options.name")  # the rest: the planted language


def data_config(preset: str, data: str = "") -> DataConfig:
  """The DataConfig of a preset: its TFDS dataset (``data`` names another), a text corpus
  (``data`` or the sample corpus), or, for a planted preset without ``data``, its language."""
  o = get_preset(preset).overrides
  if data_sources.get(o["data.source"]).synthetic and not data:
    keys = ["data.source"] + [k for k in o if k.startswith("data.options.") and k not in TEXT_KEYS]
    return overrides.apply(Config(), {k: o[k] for k in keys}).data
  keep = {k: o[k] for k in TEXT_KEYS if k in o}
  return overrides.apply(Config(), {**keep, **corpus_overrides(o["data.source"], data)}).data


def configs(preset: str, data: str = "", widths: tuple | None = None) -> list[tuple[str, Config]]:
  """[(name, Config)] of the preset's models (validated; nothing is trained). ``widths``
  selects a subset of the preset's widths (their per-width overrides go with them)."""
  p = get_preset(preset)
  dc = data_config(preset, data)
  if widths is not None and not set(widths) <= set(p.knobs.widths):
    raise ValueError(f"widths {sorted(set(widths) - set(p.knobs.widths))} are not in the "
                     f"{preset} preset's widths {p.knobs.widths}")
  out = []
  for i, w in enumerate(p.knobs.widths):
    if widths is not None and w not in widths:
      continue
    per = {k: v[i] for k, v in p.knobs.per_width.items()}
    out.append((f"d{w}", config_from(p.base, {
        **p.overrides, **per, "data": dataclasses.asdict(dc), "model.d_model": w,
        "name": f"convergence-d{w}"})))
  return out


def settings_for(preset: str, **over) -> conv.ConvergenceSettings:
  """The measurement settings of a preset; ``over``: ConvergenceSettings fields (None = the
  preset's)."""
  k = get_preset(preset).knobs
  kw = dict(n_sequences=k.n_sequences, all_sequences=k.all_sequences, grad_per=k.grad_per,
            group_size=k.group_size, chunk=k.chunk, per_mlp_r=k.per_mlp_r)
  kw.update({key: v for key, v in over.items() if v is not None})
  return conv.ConvergenceSettings(**kw)


def _digest(obj) -> str:
  return hashlib.blake2b(json.dumps(obj, sort_keys=True, default=str).encode(),
                         digest_size=8).hexdigest()


def measure_one(src, batch, settings, mdir: Path) -> dict:
  """Measure one source into mdir (skipped when meta.json matches)."""
  key = _digest({"settings": settings.to_dict(), "steps": src.steps, "model": str(src.model),
                 "batch": hashlib.blake2b(np.ascontiguousarray(batch).tobytes(),
                                          digest_size=8).hexdigest()})
  meta_path = mdir / "meta.json"
  if meta_path.exists() and json.loads(meta_path.read_text()).get("key") == key:
    return json.loads(meta_path.read_text())
  mdir.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  cka, per, steps = conv.measure(src, batch, settings, progress=lambda m: log.info("%s", m))
  write_rows(mdir / "cka.csv", cka)
  write_rows(mdir / "per.csv", per)
  write_rows(mdir / "steps.csv", steps)
  mc = src.model
  meta = {"key": key, "model": src.name, "width": mc.d_model, "n_layers": mc.n_layers,
          "n_heads": mc.n_heads, "head_dim": mc.head_dim, "vocab_size": mc.vocab_size,
          "steps": src.steps, "final_step": src.steps[-1], "settings": settings.to_dict(),
          "per_r": conv.per_ranks(mc, settings), "batch_shape": list(batch.shape),
          "seconds": round(time.perf_counter() - t0, 2)}
  write_json(meta_path, meta)
  return meta


def probe_settings(settings: conv.ConvergenceSettings) -> conv.ConvergenceSettings:
  """The settings of the further probe batches: the primary token mode and estimator only
  (what stabilisation is read from), no gradient PER."""
  return settings.replace(token_modes=settings.token_modes[:1],
                          estimators=settings.estimators[:1], grad_per=False)


def per_variants_one(src, mdir: Path) -> None:
  """measure/<model>/per_variants.csv: PER of the weights with r = every singular value and
  with r = head_dim (``conv.per_variants``), skipped when its key file matches."""
  key = _digest({"steps": src.steps, "model": str(src.model), "what": "per_variants"})
  kpath = mdir / "per_variants.key"
  if kpath.exists() and kpath.read_text() == key and (mdir / "per_variants.csv").exists():
    return
  write_rows(mdir / "per_variants.csv", conv.per_variants(src))
  kpath.write_text(key)


def train_all(out: Path, preset: str, data: str, widths, progress: RunsProgress):
  """Train (or skip) each width; returns (sources, the probe batches: the fixed batch first
  (``probes.probe_batches``), data info)."""
  cfgs = configs(preset, data, widths)
  tc0, dc = cfgs[0][1].train, cfgs[0][1].data
  ds = make_dataset(dc, seq_len=tc0.seq_len, global_batch_size=tc0.batch_size,
                    seed=tc0.data_seed, workdir=str(out / "data"))
  sources, timings = [], {}
  for name, cfg in cfgs:
    wd = out / "runs" / name
    progress.start(f"train {name} ({cfg.train.steps} steps)")
    trained = finished(wd) is None
    t0 = time.perf_counter()
    train_once(cfg, wd, dataset=ds, quiet=True)
    timings[name] = round(time.perf_counter() - t0, 2)
    progress.finish(trained)
    sources.append(conv.workdir_source(wd, name))
  k = get_preset(preset).knobs
  batches = probes.probe_batches(ds, k.n_sequences, k.probe_batches)
  path = getattr(dc.options, "path", "")
  info = {"source": dc.source, "corpus": upath(path).name if path else ds.name,
          "vocab_size": ds.vocab_size, "train_seconds": timings,
          "gamma_total": {name: optim.gamma_total(cfg.train) for name, cfg in cfgs}}
  return sources, batches, info


def run(out: Path, preset: str, *, data: str | None = None, series: list | None = None,
        series_tokens: str = "", widths: tuple | None = None, verbose: bool = True,
        allow_duplicates: bool = False, **settings_over) -> None:
  """Train (or read the series), measure and summarise into ``out``. ``series``: sbjax
  workdirs (imports, runs) or HF revision directories measured on the token file
  ``series_tokens`` instead of training (``experiments.convergence.series``; duplicated
  revisions of an import refused unless ``allow_duplicates``). ``widths``: a subset of the
  preset's widths; ``settings_over``: ConvergenceSettings fields."""
  out = upath(out)
  t0 = time.perf_counter()
  p: Preset = get_preset(preset)
  settings = settings_for(preset, **settings_over)
  out.mkdir(parents=True, exist_ok=True)
  n_train = 0 if series else len(widths or p.knobs.widths)
  progress = RunsProgress(n_train + len(series or widths or p.knobs.widths), "convergence",
                          disable=not verbose)
  if series:
    sources, batch, info = series_sources(series, series_tokens, allow_duplicates, out)
    batches = probes.split_rows(batch, settings.n_sequences, p.knobs.probe_batches)
  else:
    sources, batches, info = train_all(out, preset, data, widths, progress)
  metas = []
  for s in sources:
    progress.start(f"measure {s.name} ({len(s.steps)} checkpoints, {len(batches)} probe "
                   "batches)")
    metas.append(measure_one(s, batches[0], settings, out / "measure" / s.name))
    for j, b in enumerate(batches[1:], 1):
      measure_one(s, b, probe_settings(settings), out / "measure" / s.name / f"probe{j}")
    per_variants_one(s, out / "measure" / s.name)
    progress.finish()
  progress.close()
  summarise(out, metas)
  write_rows(out / "stab_levels.csv", levels.level_rows(out, metas))
  write_json(out / "summary.json", {
      "preset": preset, "data": info, "settings": settings.to_dict(), "frac": FRAC,
      "probe_batches": len(batches),
      "all_figures": preset not in ("test", "quick"),
      "models": [m["model"] for m in metas], "seconds": round(time.perf_counter() - t0, 1)})
