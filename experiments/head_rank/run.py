"""The head-rank sweep's run: the plan of a preset, trained by ``sbjax.studies.head_rank``
(finished runs are read back), then summary.json and the figure."""

from __future__ import annotations

from pathlib import Path

from . import report
from ..shared import text_corpus, upath, write_json
from sbjax.studies.head_rank import NAME, base_config, make_plan, run_sweep, sweep_units, \
    train_sweep

__all__ = ["NAME", "base_config", "make_plan", "run", "run_sweep", "sweep_units"]


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  """Train (or finish) the sweep into ``out``, write summary.json and draw the figure."""
  out = upath(out)
  train_sweep(out, preset, str(text_corpus(data)), verbose=verbose)
  write_json(out / report.SUMMARY, report.summarize(out))
  report.draw(out)
