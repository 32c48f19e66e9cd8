"""Checkpoint analysis: metrics of every checkpoint of a run, a CSV, a cache, figures.

    from sbjax.analysis import Settings, analyze_run, read_csv
    rows = analyze_run("runs/tiny", Settings(groups=("loss", "spectrum")))
    rows = read_csv("runs/tiny/analysis/metrics.csv")

Modules: ``settings`` (``Settings``: groups, sample sizes, variants), ``pipeline``
(``analyze_run``, the grouped vmapped forward, column definitions), ``cache`` (the
resumable per-step cache), ``table`` (CSV and atomic writes), ``figures`` (matplotlib
figures from the CSV; imported on use). CLI: ``python -m experiments.analyze``.
"""

from sbjax.analysis.analyze import COLUMN_DOCS, analyze_run, grouped_apply
from sbjax.analysis.settings import ALL_GROUPS, Settings
from sbjax.analysis.table import read_csv, write_csv

__all__ = ["ALL_GROUPS", "COLUMN_DOCS", "Settings", "analyze_run", "grouped_apply", "read_csv",
           "write_csv"]
