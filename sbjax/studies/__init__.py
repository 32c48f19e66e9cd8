"""Per-paper studies built on the library: exact rank floors (``floor``), head-rank sweeps
(``head_rank``), the neural-collapse model grid (``collapse_grid``), n-gram count matrices
(``ngram``), scaling-law fits (``scaling``) and statistics (``stats``).

``sbjax.analysis`` analyses the checkpoints of one run; the modules here combine runs, train
models or compute per-paper quantities, and are imported by the experiments.
"""

from sbjax._extras import require

require("sbjax.studies")
