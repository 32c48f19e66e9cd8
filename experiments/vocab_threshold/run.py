"""vocab_threshold's run: one head-rank sweep per vocabulary size in OUT/V<V>/, then
vocab_threshold.csv, runs.csv, fit.json and the figure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..head_rank.run import run_sweep, sweep_units
from ..shared import RunsProgress, config_from, text_corpus, write_json, write_rows
from . import report, tolerance
from .measure import loglog_fit, thresholds
from .presets import TOL, TOL_CHAR, W_LEVEL, get_preset
from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.studies.rank_sweep import Plan

NAME = "vocab_threshold"


def make_plan(preset, data: str, vocab: int, tfds_dir: str = "") -> Plan:
  """The sweep at vocabulary size ``vocab`` on the corpus ``data``."""
  p = get_preset(preset)
  tag = preset if isinstance(preset, str) else "custom"
  base = config_from(p.base, {**p.overrides, "data.path": data, "data.vocab_size": vocab,
                              "data.tfds_data_dir": tfds_dir, "name": f"{NAME}-{tag}-V{vocab}"})
  return Plan(base, **dataclasses.asdict(p.knobs.plan))


def validation_chars_per_token(plan: Plan, sub: Path) -> float:
  """Characters per token of the sweep's validation stream (its dataset, as ``run_sweep``
  built it in sub/data: the tokens are cached there)."""
  tc = plan.base.train
  ds = make_dataset(plan.base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(Path(sub) / "data"))
  tok = Tokenizer(ds.tokenizer_path)
  return tolerance.stream_chars_per_token(tok.decode, ds.val_tokens)


def run(out: Path, preset, data: str = "", verbose: bool = True) -> None:
  out = Path(out)
  corpus = str(text_corpus(data))
  plans = {v: make_plan(preset, corpus, v, str(out / "tfds"))
           for v in get_preset(preset).knobs.vocabs}
  out.mkdir(parents=True, exist_ok=True)
  progress = RunsProgress(sum(sweep_units(p) for p in plans.values()), NAME, disable=not verbose)
  table, runs = [], []
  try:
    for v, plan in plans.items():
      sub = out / f"V{v}"
      rows = run_sweep(plan, sub, progress, prefix=f"V={v} ")
      runs += [{"V": v, **r} for r in rows]
      table.append(thresholds(sub, cpt=validation_chars_per_token(plan, sub)))
      write_rows(out / report.TABLE_CSV, table)
      write_rows(out / report.RUNS_CSV, runs)
  finally:
    progress.close()
  write_json(out / report.FIT, {
      "r_star": loglog_fit([t["V"] for t in table], [t["r_star"] for t in table]),
      "r_werror06": loglog_fit([t["V"] for t in table], [t["r_werror06"] for t in table]),
      "n_censored": sum(t["censored"] for t in table), "tol": TOL, "tol_char": TOL_CHAR,
      "w_level": W_LEVEL})
  report.draw(out)
