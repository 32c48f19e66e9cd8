"""vocab_threshold's run: one head-rank sweep per vocabulary size in OUT/V<V>/, then
vocab_threshold.csv, runs.csv, fit.json and the figure."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.head_rank import run_sweep, sweep_units
from ..shared import RunsProgress, config_from, text_corpus, write_json, write_rows
from . import ngram, report, tolerance
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
  base = config_from(p.base, {**p.overrides, **corpus_overrides("text", data, tfds_dir),
                              "data.vocab_size": vocab, "name": f"{NAME}-{tag}-V{vocab}"})
  return Plan(base, **dataclasses.asdict(p.knobs.plan))


def sweep_dataset(plan: Plan, sub: Path):
  """The sweep's dataset, as ``run_sweep`` built it in sub/data (the tokens are cached)."""
  tc = plan.base.train
  return make_dataset(plan.base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(Path(sub) / "data"))


def validation_chars_per_token(plan: Plan, sub: Path, ds=None) -> float:
  """Characters per token of the sweep's validation stream."""
  ds = sweep_dataset(plan, sub) if ds is None else ds
  tok = Tokenizer(ds.tokenizer_path)
  return tolerance.stream_chars_per_token(tok.decode, ds.val_tokens)


def measure_v(plan: Plan, sub: Path, vocab: int, knobs, ngram_rows: list) -> dict:
  """One row of vocab_threshold.csv: the trained r* and, with n-gram knobs, the exact bigram
  r* at the same tolerance (its per-rank rows are appended to ``ngram_rows``)."""
  ds = sweep_dataset(plan, sub)
  cpt = validation_chars_per_token(plan, sub, ds)
  row = thresholds(sub, cpt=cpt)
  if knobs.ngram is not None:
    t0 = time.perf_counter()
    rows = ngram.ngram_rows(ds.train_tokens, ds.val_tokens, vocab, knobs.ngram)
    ngram_rows += rows
    row.update(ngram.ngram_threshold(rows, row["tol_token"]),
               ngram_seconds=round(time.perf_counter() - t0, 1))
  return row


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  out = Path(out)
  corpus = str(text_corpus(data))
  knobs = get_preset(preset).knobs
  plans = {v: make_plan(preset, corpus, v, str(out / "tfds")) for v in knobs.vocabs}
  out.mkdir(parents=True, exist_ok=True)
  progress = RunsProgress(sum(sweep_units(p) for p in plans.values()), NAME, disable=not verbose)
  table, runs, ngram_rows = [], [], []
  try:
    for v, plan in plans.items():
      sub = out / f"V{v}"
      rows = run_sweep(plan, sub, progress, prefix=f"V={v} ")
      runs += [{"V": v, **r} for r in rows]
      table.append(measure_v(plan, sub, v, knobs, ngram_rows))
      write_rows(out / report.TABLE_CSV, table)
      write_rows(out / report.RUNS_CSV, runs)
      if ngram_rows:
        write_rows(out / report.NGRAM_CSV, ngram_rows)
  finally:
    progress.close()
  write_json(out / report.FIT, {
      "r_star": loglog_fit([t["V"] for t in table], [t["r_star"] for t in table]),
      "r_werror06": loglog_fit([t["V"] for t in table], [t["r_werror06"] for t in table]),
      **({"r_star_ngram": loglog_fit([t["V"] for t in table],
                                     [t["r_star_ngram"] for t in table]),
          "n_censored_ngram": sum(t["ngram_censored"] for t in table)}
         if knobs.ngram is not None else {}),
      "n_censored": sum(t["censored"] for t in table), "tol": TOL, "tol_char": TOL_CHAR,
      "w_level": W_LEVEL})
  report.draw(out)
