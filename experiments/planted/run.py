"""The planted experiment's runs: the exact floors, the trained rank-r heads (part 1) and the
mixture runs (part 2), written to CSV/JSON in OUT (see the package docstring)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import report
from .configs import arm_of, cell_of, knee_configs, mix_configs, settings, validate
from .measure import measure, selection_batches
from .presets import Preset, get_preset
from ..shared import RunsProgress, read_rows, upath, write_json, write_rows
from sbjax import checkpoint as ckpt
from sbjax.atomic import atomic_write_text
from sbjax.data import make_dataset
from sbjax import heads
from sbjax.heads import head_param_count
from sbjax.studies.floor import floor_curve
from sbjax.studies.head_flops import head_flops
from sbjax.train import member_dir, train_once
from sbjax.train.done import finished

CSV_KNEE, CSV_FLOOR, CSV_MIX, META = report.CSV_KNEE, report.CSV_FLOOR, report.CSV_MIX, report.META
CSV_MIX_FLOOR = report.CSV_MIX_FLOOR


def _result_key(cfg, p: Preset) -> str:
  sel = f"|select{p.knobs.select_batches}" if p.knobs.select_batches else ""
  return json.dumps(cfg.to_dict(), sort_keys=True) + f"|{p.knobs.measure_batches}" + sel


def _cached_result(wd: Path, key: str) -> dict | None:
  """wd/result.json when it holds the measurement of ``key``."""
  res_path = wd / "result.json"
  if res_path.exists():
    res = json.loads(res_path.read_text())
    if res.get("key") == key:
      return res
  return None


def _selection(ds, p: Preset, cfg) -> list:
  """The selection stream's batches of ``ds``'s language (``measure.selection_batches``)."""
  return selection_batches(ds.planted, p.knobs.select_batches, cfg.train.batch_size,
                           cfg.train.seq_len, cfg.data.options.seed)


def _measure_into(cfg, wd: Path, ds, p: Preset, key: str, seconds: float) -> dict:
  """Measures wd's last checkpoint on the validation stream (and, with ``select_batches``,
  on the selection stream: sel_*) and keeps it in wd/result.json."""
  _, params, _ = ckpt.load_params(wd)
  res = measure(cfg, params, ds.planted, ds.eval_batches(p.knobs.measure_batches))
  if p.knobs.select_batches:
    sel = measure(cfg, params, ds.planted, _selection(ds, p, cfg))
    res.update({f"sel_{k}": v for k, v in sel.items()})
  res.update(key=key, seconds=seconds, head_params=head_param_count(cfg.model))
  atomic_write_text(wd / "result.json", json.dumps(res))
  return res


def _train_and_measure(cfg, wd: Path, ds, p: Preset, verbose: bool) -> dict:
  """Trains one run unless it is finished (``sbjax.train.train_once``) and measures it; the
  measurement is kept in wd/result.json, keyed by the config and the measurement size."""
  key = _result_key(cfg, p)
  res = _cached_result(wd, key)
  if res is not None:
    return res
  t0 = time.perf_counter()
  train_once(cfg, wd, dataset=ds, quiet=not verbose)
  return _measure_into(cfg, wd, ds, p, key, time.perf_counter() - t0)


def _population_and_measure(cfgs, wd: Path, ds, p: Preset, verbose: bool) -> tuple:
  """Trains the runs ``cfgs`` (one arm: same model, different seed and lr) as ONE population
  in wd (``sbjax.train.train_once``; member i in wd/member_<i>) unless every member's
  measurement is kept, then measures each member; ``seconds`` is the population's time / n.
  Returns (results, trained?)."""
  keys = [_result_key(c, p) for c in cfgs]
  dirs = [member_dir(wd, i) for i in range(len(cfgs))]
  kept = [_cached_result(d, k) for d, k in zip(dirs, keys)]
  if all(r is not None for r in kept):
    return kept, False
  t0 = time.perf_counter()
  train_once(cfgs, dirs, dataset=ds, quiet=not verbose)
  sec = (time.perf_counter() - t0) / len(cfgs)
  return [_measure_into(c, d, ds, p, k, sec) for c, d, k in zip(cfgs, dirs, keys)], True


def _dataset(cfg):
  return make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                      seed=cfg.train.data_seed, workdir=None, process_index=0, process_count=1)


def _floors(lang, ranks, p: Preset, path: Path) -> dict:
  """floor(r) for ranks (cached in path, keyed by the language and the ranks)."""
  key = json.dumps({"lang": lang.info(), "ranks": sorted(set(ranks)), "gtol": p.knobs.floor_gtol,
                    "method": "multi-start", "n_random": p.knobs.floor_random,
                    "n_wide": p.knobs.floor_wide})
  meta = path.with_suffix(".json")
  if path.exists() and meta.exists() and meta.read_text() == key:
    return {int(r["rank"]): r for r in read_rows(path)}
  # Convergence is recorded per rank (planted_floor.csv, column converged) and reported.
  res = floor_curve(lang, ranks, gtol=p.knobs.floor_gtol, max_iter=p.knobs.floor_max_iter,
                    restarts=2, require_converged=False, n_random=p.knobs.floor_random,
                    n_wide=p.knobs.floor_wide)
  rows = [{**r.row(), "converged": str(bool(r.converged))} for r in res]
  write_rows(path, rows)
  meta.write_text(key)
  return {int(r["rank"]): r for r in rows}


def _measured(progress: RunsProgress, label: str, cfg, wd: Path, ds, p: Preset,
              verbose: bool) -> dict:
  """One run inside the experiment's progress (run i of n, total ETA)."""
  progress.start(label)
  trained = finished(wd) is None
  res = _train_and_measure(cfg, wd, ds, p, verbose)
  progress.finish(trained=trained)
  return res


def _knee(out: Path, confs, p: Preset, progress, verbose: bool):
  """Part 1: planted.csv, one row per head rank; returns the language."""
  ds = _dataset(confs[0][1])
  lang = ds.planted
  floors = _floors(lang, [r for r, _ in confs] + [lang.vocab], p, out / CSV_FLOOR)
  rows = []
  for r, cfg in confs:
    res = _measured(progress, f"r={r}", cfg, out / "runs" / f"r{r}", ds, p, verbose)
    fl = float(floors[r]["floor"])
    rows.append({"rank": r, "eval_loss": res["eval_loss"], "eval_acc": res["eval_acc"],
                 "expected_loss": res["expected_loss"], "floor": fl, "H": lang.entropy,
                 "gap": res["expected_loss"] - lang.entropy, "floor_gap": fl - lang.entropy})
    write_rows(out / CSV_KNEE, rows)
  return lang


def _has_rank(cfg) -> bool:
  """A head with an explicit rank (a ``rank`` field): its exact low-rank floor applies."""
  return heads.get(cfg.model.head).rank_limited and hasattr(cfg.model.head, "rank")


def _mix_row(label: str, cfg, res: dict, mix, mfloors: dict) -> dict:
  lowrank = _has_rank(cfg)
  fl = float(mfloors[cfg.model.rank]["floor"]) if lowrank else float("nan")
  return {"label": label, "arm": arm_of(cfg), "seed": cfg.train.seed, "lr": cfg.train.lr,
          "head": cfg.model.head.kind, "d_model": cfg.model.d_model,
          "rank": cfg.model.rank if lowrank else 0,
          "n_mix": getattr(cfg.model.head, "n_mix", 1) if not lowrank else 0,
          "head_params": res["head_params"], "eval_loss": res["eval_loss"],
          "eval_acc": res["eval_acc"], "expected_loss": res["expected_loss"],
          "floor": fl, "H": mix.entropy, "gap": res["expected_loss"] - mix.entropy,
          "floor_gap": fl - mix.entropy}


def mix_groups(mconfs) -> list:
  """Part 2's trainings: [(arm, [(label, Config)])], one per arm in order of appearance (an
  arm of several runs is trained as one population)."""
  groups: dict = {}
  for label, cfg in mconfs:
    groups.setdefault(arm_of(cfg), []).append((label, cfg))
  return list(groups.items())


def _cell_columns(cell: tuple, cfg, res: dict, h: float) -> dict:
  """The columns of a run in a (language, objective) cell: the cell, the head's FLOPs per
  token (``sbjax.studies.head_flops``) and the selection stream's measurement."""
  lang, obj, run = cell
  return {"lang": lang, "objective": obj, "run": run, "head_flops": head_flops(cfg.model),
          "sel_eval_loss": res["sel_eval_loss"], "sel_expected_loss": res["sel_expected_loss"],
          "sel_gap": res["sel_expected_loss"] - h}


def _mix_language(out: Path, name, confs, p: Preset) -> tuple:
  """(dataset, exact lowrank floors) of one part-2 language (``name`` None: the plain part 2,
  floors in planted_mix_floor.csv; else planted_mix_floor_<name>.csv)."""
  mds = _dataset(confs[0])
  lr_ranks = sorted({c.model.rank for c in confs if _has_rank(c)})
  path = out / (CSV_MIX_FLOOR if name is None else f"planted_mix_floor_{name}.csv")
  return mds, (_floors(mds.planted, lr_ranks, p, path) if lr_ranks else {})


def _mix_arm(out: Path, arm: str, runs, mds, p: Preset, progress, verbose: bool) -> list:
  """Trains (or reuses) one arm of part 2, as one population when it has several runs."""
  wd = out / "runs" / f"mix-{arm}"
  cfgs = [c for _, c in runs]
  progress.start(f"mix {arm}" + (f" x{len(runs)}" if len(runs) > 1 else ""))
  if len(runs) == 1:
    trained = finished(wd) is None
    results = [_train_and_measure(cfgs[0], wd, mds, p, verbose)]
  else:
    results, trained = _population_and_measure(cfgs, wd, mds, p, verbose)
  progress.finish(trained=trained)
  return results


def _mixture(out: Path, mconfs, p: Preset, progress, verbose: bool) -> dict:
  """Part 2: planted_mix.csv, one row per mixture run; returns {language name: language}
  (name None for a preset without ``mix_langs``/``mix_objectives``)."""
  cells, langs, mrows = cell_of(p), {}, []
  for arm, runs in mix_groups(mconfs):
    cell = cells[arm]
    if cell[0] not in langs:
      langs[cell[0]] = _mix_language(out, cell[0], [c for _, c in mconfs
                                                    if cells[arm_of(c)][0] == cell[0]], p)
    mds, mfloors = langs[cell[0]]
    results = _mix_arm(out, arm, runs, mds, p, progress, verbose)
    for (label, c), res in zip(runs, results):
      row = _mix_row(label, c, res, mds.planted, mfloors)
      mrows.append(row if cell[0] is None else
                   {**row, **_cell_columns(cell, c, res, mds.planted.entropy)})
    write_rows(out / CSV_MIX, mrows)
  return {name: mds.planted for name, (mds, _) in langs.items()}


def _mixture_meta(langs: dict) -> dict:
  """planted_meta.json's record of part 2: ``mixture`` (the plain part 2's language, or the
  first planted-mixture language of the cells) and, with cells, ``languages`` by name."""
  if not langs:
    return {"mixture": None}
  if None in langs:
    return {"mixture": langs[None].info()}
  info = {name: lang.info() for name, lang in langs.items()}
  mix = next((v for v in info.values() if v.get("kind") != "planted"), next(iter(info.values())))
  return {"mixture": mix, "languages": info}


PARTS = ("knee", "mix")


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True,
        parts=None) -> None:
  """Runs the preset's parts (``Knobs.parts``; both by default) into ``out`` (finished runs
  and floors are reused) and draws the figures; ``parts`` = ("mix",) runs part 2 alone (part
  1's CSV is then whatever ``out`` holds). ``data`` is ignored: the planted languages are
  sampled, no corpus is read (the ``Experiment`` protocol of ``sbjax.cli.reproduce``)."""
  del data
  p = get_preset(preset)
  parts = tuple(p.knobs.parts if parts is None else parts)
  if not parts or set(parts) - set(PARTS):
    raise ValueError(f"planted: parts={tuple(parts)}; allowed: a non-empty subset of {PARTS}")
  validate(p)
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  confs, mconfs = knee_configs(p), mix_configs(p) if "mix" in parts else []
  n_runs = (len(confs) if "knee" in parts else 0) + len(mix_groups(mconfs))
  progress = RunsProgress(n_runs, "planted", disable=not verbose)
  try:
    t0 = time.perf_counter()
    lang = (_knee(out, confs, p, progress, verbose) if "knee" in parts
            else _dataset(confs[0][1]).planted)
    t1 = time.perf_counter()
    langs = _mixture(out, mconfs, p, progress, verbose) if mconfs else {}
  finally:
    progress.close()
  write_json(out / META, {"preset": preset if isinstance(preset, str) else "custom",
                          "settings": settings(p), "language": lang.info(),
                          **_mixture_meta(langs), "seconds_knee": t1 - t0,
                          "seconds_mix": time.perf_counter() - t1 if langs else 0.0})
  report.draw(out)
