"""Per-paper studies built on the library: exact rank floors (``floor``), head-rank sweeps
(``head_rank``), n-gram count matrices and floors (``ngram``, ``ngram_floor``, ``bigram_fit``,
``bigram_rstar``), the W-error of targets and heads (``werror``, ``target_werror``), head fits
(``head_fit``), head FLOPs (``head_flops``), the text corpus (``corpus``), statistics (``stats``,
``welch``).

``sbjax.analysis`` analyses the checkpoints of one run; the modules here combine runs, train
models or compute per-paper quantities, and are imported by the experiments.
"""

from sbjax._extras import require

require("sbjax.studies")
