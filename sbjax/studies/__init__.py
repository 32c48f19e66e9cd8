"""Per-paper studies built on the library: exact rank floors (``floor``), head-rank sweeps
(``rank_sweep``), n-gram target matrices (``ngram``, ``lowrank_svd``), scaling-law fits
(``scaling``), statistics (``stats``) and layer convergence over checkpoints (``convergence``).

``sbjax.analysis`` analyses the checkpoints of one run; the modules here combine runs, train
models or compute per-paper quantities, and are imported by the experiments.
"""
