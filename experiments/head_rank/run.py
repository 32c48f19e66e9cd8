"""The head-rank sweep's run: the plan of a preset, trained by ``sbjax.studies.rank_sweep``
(finished runs are read back), then summary.json and the figure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import report
from .presets import get_preset
from ..shared import RunsProgress, SweepProgress, config_from, text_corpus, write_json
from sbjax.config import Config
from sbjax.data import make_dataset
from sbjax.studies import rank_sweep

NAME = "head_rank"


def base_config(preset, data: str, vocab: int | None = None) -> Config:
  """The trunk/data/training config of a preset (the head fields are set per run)."""
  p = get_preset(preset)
  o = {**p.overrides, "data.path": data}
  if vocab:
    o["data.vocab_size"] = vocab
  return config_from(p.base, o)


def make_plan(preset, data: str, vocab: int | None = None) -> rank_sweep.Plan:
  """The sweep of a preset on the corpus ``data`` (``vocab`` replaces its vocabulary size)."""
  return rank_sweep.Plan(base_config(preset, data, vocab),
                         **dataclasses.asdict(get_preset(preset).knobs))


def sweep_units(plan: rank_sweep.Plan) -> int:
  """How many progress messages ``rank_sweep.run_plan`` sends for ``plan``: one per population
  (an LR grid of protocol full or b) and one per separate run."""
  return sum(1 if plan.population and len(g) > 1 and g[0].protocol != "a" else len(g)
             for g in rank_sweep.groups(plan))


def run_sweep(plan: rank_sweep.Plan, out: Path, progress: RunsProgress, prefix: str = "") -> list:
  """Train (or read back) every run of ``plan`` into ``out``; returns the CSV rows."""
  tc = plan.base.train
  ds = make_dataset(plan.base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / "data"))
  steps = SweepProgress(progress, prefix)
  try:
    return rank_sweep.run_plan(plan, out, ds, progress=steps)
  finally:
    steps.finish()


def run(out: Path, preset, data: str = "", verbose: bool = True) -> None:
  """Train (or finish) the sweep into ``out``, write summary.json and draw the figure."""
  out = Path(out)
  plan = make_plan(preset, str(text_corpus(data)))
  out.mkdir(parents=True, exist_ok=True)
  progress = RunsProgress(sweep_units(plan), NAME, disable=not verbose)
  try:
    run_sweep(plan, out, progress)
  finally:
    progress.close()
  write_json(out / report.SUMMARY, report.summarize(out))
  report.draw(out)
