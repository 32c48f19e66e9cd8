"""Per-paper studies built on the library: exact rank floors (``floor``), head-rank sweeps
(``head_rank``), n-gram target matrices (``ngram``, ``lowrank_svd``), scaling-law fits
(``scaling``), statistics (``stats``) and layer convergence over checkpoints (``convergence``).

``sbjax.analysis`` analyses the checkpoints of one run; the modules here combine runs, train
models or compute per-paper quantities, and are imported by the experiments.
"""

from sbjax._extras import require

require("sbjax.studies")
