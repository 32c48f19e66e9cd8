"""Checkpoint analysis: metrics of every checkpoint of a run, a CSV, figures.

    from sbjax.analysis import Settings, analyze_run
    rows = analyze_run("runs/tiny", Settings(groups=("loss", "spectrum")))

``analyze_run`` (``analyze``) composes ``settings`` (the groups, sample sizes, variants),
``samples`` (the fixed samples), ``forward`` (the grouped vmapped forward, its passes, the
weight metrics), ``layerwise`` (PER and CKA to a reference checkpoint), ``rows`` (one row per
checkpoint) and ``outputs`` (files, column definitions, ``figures``) on ``measure`` (every
checkpoint measured once, damaged steps set aside). CLI: ``python -m experiments.analyze``.
"""

from sbjax._extras import require

require("sbjax.analysis")

from sbjax.analysis.analyze import COLUMN_DOCS, analyze_run
from sbjax.analysis.settings import ALL_GROUPS, Settings
from sbjax.analysis.table import read_csv, write_csv

__all__ = ["ALL_GROUPS", "COLUMN_DOCS", "Settings", "analyze_run", "read_csv", "write_csv"]
