"""mos_text's run: one population per arm (the init seeds as members, one compile each) on
one text dataset, then mos_text.csv (one row per run), mos_text_meta.json and the figure."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from . import report
from .presets import Preset, get_preset
from ..shared import RunsProgress, upath, write_json, write_rows
from sbjax.config import Config
from sbjax.data import make_dataset
from sbjax.heads import head_param_count
from sbjax.model import Model
from sbjax import overrides
from sbjax.overrides import config_from
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.head_flops import head_flops
from sbjax.train import member_dir, train_once
from sbjax.train.done import finished


def matched_rank(base: Config, target: int) -> int:
  """The lowrank rank in 1..d whose head parameter count is closest to ``target`` (ties: the
  smaller rank)."""
  def count(r):
    return head_param_count(overrides.apply(base, {"model.head": "lowrank",
                                                   "model.head.rank": r}).model)
  return min(range(1, base.model.d_model + 1), key=lambda r: (abs(count(r) - target), r))


def arm_configs(p: Preset, data: str | None = None) -> list[tuple[str, Config]]:
  """(arm, Config at seed 0) of every arm, on the corpus ``data`` (default: the packaged
  sample corpus); a lowrank arm of head_rank 0 gets ``matched_rank`` of the mos arm."""
  base = config_from(p.base, {**p.overrides, **corpus_overrides("text", data)})
  out, mos = [], None
  for arm, o in p.knobs.arms:
    o = dict(o)
    if o.get("model.head") == "lowrank" and int(o.get("model.head.rank", 0)) == 0:
      if mos is None:
        raise ValueError(f"mos_text preset: the matched lowrank arm {arm!r} needs a mos arm "
                         "before it in Knobs.arms")
      o["model.head.rank"] = matched_rank(base, head_param_count(mos.model))
    cfg = overrides.apply(base, {**o, "name": f"{base.name}-{arm}"})
    if cfg.model.head.kind == "mos" and mos is None:
      mos = cfg
    out.append((arm, cfg))
  return out


def _row(arm: str, cfg: Config, s: dict, seconds: float) -> dict:
  return {"arm": arm, "head": cfg.model.head.kind, "seed": cfg.train.seed, "lr": cfg.train.lr,
          "d_model": cfg.model.d_model, "vocab": cfg.model.vocab_size,
          "rank": getattr(cfg.model.head, "rank", 0), "n_mix": getattr(cfg.model.head, "n_mix", 0),
          "head_params": head_param_count(cfg.model), "head_flops": head_flops(cfg.model),
          "n_params": Model(cfg.model).param_count(), "steps": int(s["step"]),
          "eval_loss": float(s["eval_loss"]), "eval_acc": float(s.get("eval_acc", "nan")),
          "seconds": seconds}


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  """Trains every arm of the preset (its seeds as one population; finished members are read
  back) on the corpus ``data`` and writes the CSV, the meta record and the figure."""
  p = get_preset(preset)
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  confs = arm_configs(p, data)
  tc = confs[0][1].train
  ds = make_dataset(confs[0][1].data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / "data"))
  if ds.vocab_size != confs[0][1].model.vocab_size:
    raise ValueError(f"mos_text: the tokenizer has {ds.vocab_size} pieces, not the preset's "
                     f"{confs[0][1].model.vocab_size}; pass a larger corpus with --data=DIR")
  rows = []
  progress = RunsProgress(len(confs), "mos_text", disable=not verbose)
  try:
    for arm, cfg in confs:
      cfgs = [dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(s)))
              for s in p.knobs.seeds]
      dirs = [member_dir(out / "runs" / arm, i) for i in range(len(cfgs))]
      progress.start(f"{arm} x{len(cfgs)}")
      trained = any(finished(d) is None for d in dirs)
      t0 = time.perf_counter()
      sums = train_once(cfgs, dirs, dataset=ds, quiet=not verbose)
      sec = (time.perf_counter() - t0) / len(cfgs)
      progress.finish(trained=trained)
      rows += [_row(arm, c, s, sec) for c, s in zip(cfgs, sums)]
      write_rows(out / report.CSV, rows)
  finally:
    progress.close()
  write_json(out / report.META, {"preset": preset if isinstance(preset, str) else "custom",
                                 "corpus": str(getattr(cfgs[0].data.options, "path", "")),
                                 "data": ds.info(), "seeds": list(p.knobs.seeds),
                                 "settings": {"steps": tc.steps, "batch": tc.batch_size,
                                              "seq_len": tc.seq_len, "lr": tc.lr,
                                              "eval_batches": tc.eval_batches,
                                              "n_layers": cfg.model.n_layers}})
  report.draw(out)
