"""Checkpoint analysis: metrics of every checkpoint of a run, a CSV, a cache, figures.

    from sbjax.analysis import Settings, analyze_run, read_csv
    rows = analyze_run("runs/tiny", Settings(groups=("loss", "spectrum")))
    rows = read_csv("runs/tiny/analysis/metrics.csv")

Modules: ``settings`` (``Settings``: groups, sample sizes, variants), ``analyze``
(``analyze_run``, composing the rest), ``samples`` (the fixed samples), ``forward`` (the
grouped vmapped forward and its passes, weight metrics), ``layerwise`` (PER and CKA to a
reference checkpoint, the one implementation, float32 device or float64 host), ``rows``
(one row per checkpoint), ``cache`` (the resumable per-step cache), ``damaged`` (a damaged
checkpoint named, set aside and left out), ``outputs`` (files and column definitions),
``progress`` (tqdm bar or log lines), ``table`` (CSV and atomic writes), ``figures``
(matplotlib figures from the CSV). CLI: ``python -m experiments.analyze``.

Only checkpoints of ONE run are analysed here; per-paper studies live in ``sbjax.studies``.
"""

from sbjax._extras import require

require("sbjax.analysis")

from sbjax.analysis.analyze import COLUMN_DOCS, analyze_run
from sbjax.analysis.forward import grouped_apply
from sbjax.analysis.settings import ALL_GROUPS, Settings
from sbjax.analysis.table import read_csv, write_csv

__all__ = ["ALL_GROUPS", "COLUMN_DOCS", "Settings", "analyze_run", "grouped_apply", "read_csv",
           "write_csv"]
