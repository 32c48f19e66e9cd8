"""vocab_threshold's run: one head-rank sweep per vocabulary size in OUT/V<V>/, then
vocab_threshold.csv, runs.csv, fit.json and the figure. vocab_threshold_meta.json names the
preset's V, those not run yet, a budget stop and the budget clock's estimates (written at the
start, after each V and at a stop: the report of a run that stopped early reads it), and keeps
in ``runs`` the record of every call into OUT (``CALL_KEYS``; ``experiments.shared.
CallRecord``): a rerun after a budget stop keeps the first call's stop, times and
estimates."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from sbjax.studies import rank_sweep
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.progress import SweepProgress
from ..shared import (CallRecord, RunsProgress, config_from, text_corpus, upath, write_json,
                      write_rows)
from sbjax.paths import local_file
from . import corpus_limits, ngram, report, tolerance
from .bigram_n_run import run_bigram_n
from .budget import Clock, OverBudget
from .measure import thresholds
from .presets import get_preset
from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.studies.rank_sweep import Plan

NAME = "vocab_threshold"


TOKEN_FILES = ("train.uint16.bin", "val.uint16.bin", "tokenizer.model")


def uses_tokens(preset) -> bool:
  """A preset that reads shipped token files (gpu, gpu-test) rather than a text corpus."""
  return get_preset(preset).overrides.get("data.source") == "tokens"


def token_dir(data: str | None, vocabs) -> Path:
  """``--data=DIR`` of token files: DIR/V<V>/ holds TOKEN_FILES for every V of the preset
  (benchmarks/build_device_tokens.py writes them); one clear error names what is missing."""
  build = ("build them on a CPU with benchmarks/build_device_tokens.py (a text directory as "
           f"its --data, V in {', '.join(map(str, vocabs))}), then pass --data=device_tokens")
  if not data:
    raise ValueError(f"--data: this preset trains on token files, none given; {build}")
  for v in vocabs:
    for name in TOKEN_FILES:
      if not (upath(data) / f"V{v}" / name).is_file():  # local or gs://
        raise FileNotFoundError(f"--data={data}: {upath(data) / f'V{v}' / name} is missing; "
                                f"{build}")
  return upath(data)


def token_overrides(data: str, vocab: int) -> dict:
  d = upath(data) / f"V{vocab}"
  return {"data": {"source": "tokens", "options": {  # the whole data section: the token files
      "path": str(d / TOKEN_FILES[0]), "val_path": str(d / TOKEN_FILES[1]), "vocab": vocab}}}


def make_plan(preset, data: str, vocab: int, tfds_dir: str = "") -> Plan:
  """The sweep at vocabulary size ``vocab`` on the corpus ``data`` (a token folder for a
  preset of ``data.source=tokens``)."""
  p = get_preset(preset)
  tag = preset if isinstance(preset, str) else "custom"
  where = (token_overrides(data, vocab) if uses_tokens(preset)
           else {**corpus_overrides("text", data, tfds_dir), "data.options.vocab_size": vocab})
  base = config_from(p.base, {**p.overrides, **where, "name": f"{NAME}-{tag}-V{vocab}"})
  return Plan(base, **dataclasses.asdict(p.knobs.plan), head_population=p.knobs.head_population,
              trunk=p.knobs.trunk)


def sweep_dataset(plan: Plan, sub: Path):
  """The sweep's dataset, as ``run_sweep`` built it in sub/data (the tokens are cached)."""
  tc = plan.base.train
  return make_dataset(plan.base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(upath(sub) / "data"))


def train_v(plan: Plan, sub: Path, progress: RunsProgress, clock: Clock | None) -> tuple:
  """Train (or read back) the sweep of one V into ``sub``: (the CSV rows, whether any of its
  runs trained in this call; none does when all are finished). With a ``clock`` every run
  that trains is timed, and stopped before the budget (``budget``)."""
  steps = SweepProgress(progress, f"V={sub.name[1:]} ")
  timed = None if clock is None else clock.hooks(f"{sub.name}/")
  ran = []

  def hooks(name: str, cfgs: list, dirs: list) -> list:
    ran.append(name)
    return [] if timed is None else timed(name, cfgs, dirs)

  try:
    return rank_sweep.run_plan(plan, sub, sweep_dataset(plan, sub), progress=steps,
                               hooks=hooks), bool(ran)
  finally:
    steps.finish()


def validation_chars_per_token(plan: Plan, sub: Path, ds=None) -> float:
  """Characters per token of the sweep's validation stream (token files: the tokenizer.model
  shipped beside them)."""
  ds = sweep_dataset(plan, sub) if ds is None else ds
  tok = Tokenizer(ds.tokenizer_path or
                  local_file(upath(plan.base.data.options.path).with_name(TOKEN_FILES[2])))
  return tolerance.stream_chars_per_token(tok.decode, ds.val_tokens)


def measure_v(plan: Plan, sub: Path, vocab: int, knobs, ngram_rows: list) -> dict:
  """One row of vocab_threshold.csv: the trained r* and, with n-gram knobs, the exact bigram
  r* at the same tolerance (its per-rank rows are appended to ``ngram_rows``)."""
  ds = sweep_dataset(plan, sub)
  cpt = validation_chars_per_token(plan, sub, ds)
  row = thresholds(sub, cpt=cpt)
  counts = np.bincount(np.asarray(ds.train_tokens).astype(np.int64), minlength=vocab)
  row.update(train_tokens=int(len(ds.train_tokens)),
             types_under_50=int(np.sum(counts < corpus_limits.RARE)))
  if knobs.ngram is not None:
    t0 = time.perf_counter()
    rows = ngram.ngram_rows(ds.train_tokens, ds.val_tokens, vocab, knobs.ngram)
    ngram_rows += rows
    row.update(ngram.ngram_threshold(rows, row["tol_token"]),
               ngram_seconds=round(time.perf_counter() - t0, 1))
  return row


# one call's record in vocab_threshold_meta.json's "runs" ("trained": the V whose sweep
# finished in that call after training in it, a resumed one included; "estimates": the budget
# clock's, per run or population timed: s/step, steps, projected end in s since the call began)
CALL_KEYS = ("preset", "started", "ended", "seconds", "trained", "stopped", "not_run",
             "estimates")


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True,
        now: Callable[[], float] = time.perf_counter) -> None:
  """The sweep of every V of ``preset`` into ``out`` (module doc); ``now``: the budget's clock
  (budget.Clock)."""
  out = upath(out)
  knobs = get_preset(preset).knobs
  if knobs.bigram_n is not None:  # the bigram r*(V, N) presets: no training
    return run_bigram_n(out, preset, data=data, verbose=verbose)
  corpus = str(token_dir(data, knobs.vocabs) if uses_tokens(preset) else text_corpus(data))
  plans = {v: make_plan(preset, corpus, v, str(out / "tfds")) for v in knobs.vocabs}
  out.mkdir(parents=True, exist_ok=True)
  progress = RunsProgress(sum(rank_sweep.progress_units(p) for p in plans.values()), NAME,
                          disable=not verbose)
  clock = (Clock(knobs.budget_s, knobs.estimate_at, knobs.estimate_warmup, now=now)
           if knobs.budget_s else None)
  rec = CallRecord(out / report.META, CALL_KEYS, {
      "preset": preset if isinstance(preset, str) else "custom", "data": data or "",
      "vocabs": list(knobs.vocabs), "budget_s": knobs.budget_s, "estimate_at": knobs.estimate_at,
      "estimate_warmup": knobs.estimate_warmup, "stopped": None,
      "not_run": list(knobs.vocabs)})
  rec.watch(clock)  # an estimate is in the meta at once (a cut-off keeps it)
  rec.write()
  table, runs, ngram_rows = [], [], []
  try:
    for v, plan in plans.items():
      sub = out / f"V{v}"
      rows, trained = train_v(plan, sub, progress, clock)
      runs += [{"V": v, **r} for r in rows]
      table.append(measure_v(plan, sub, v, knobs, ngram_rows))
      write_rows(out / report.TABLE_CSV, table)
      write_rows(out / report.RUNS_CSV, runs)
      if ngram_rows:
        write_rows(out / report.NGRAM_CSV, ngram_rows)
      rec.trained += [v] if trained else []
      rec.write(not_run=list(knobs.vocabs)[len(table):])
  except OverBudget as e:  # the finished V are in the tables (the report says so); a rerun resumes
    print(f"stopped: {e}", file=sys.stderr, flush=True)
    rec.meta["stopped"] = str(e)
    raise
  finally:  # also after a preemption (SIGTERM) or a failure: this call's record, as it ended
    progress.close()
    rec.write(not_run=list(knobs.vocabs)[len(table):])
  write_json(out / report.FIT, report.table_fit(table))
  report.draw(out)
