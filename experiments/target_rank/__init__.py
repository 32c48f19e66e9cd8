r"""The rank of the target (Godey et al. 2024, E6): W-error of empirical next-token matrices.

  python -m experiments.target_rank --preset=cpu --out=out/target_rank
  python -m experiments.target_rank --preset=quick --out=/tmp/tr --data=DIR_OF_TXT

For each vocabulary size V (cpu: 512, 1024, 2048, 4096) a sentencepiece tokenizer is
trained on the corpus (default: the packaged sample corpus, ``sbjax/data/sample_text``) by the text
pipeline (``sbjax.data.make_dataset``; both splits are used, as two streams). For each context
length n = 1..4 the C x V next-token count matrix of the contexts seen >= min_count times
is built (``sbjax.studies.ngram``, sparse), and for each variant

    raw            P[c, v] = N[c, v] / n_c                    (the paper's matrix)
    addk           (N[c, v] + k) / (n_c + k V)                 (add-k smoothed probabilities)
    logp           log((N[c, v] + k) / (n_c + k V))            (smoothed log-probabilities)
    logp_centered  logp minus its row mean                     (logits up to the row constant
                                                                softmax ignores)

the curve W-error(d) = sqrt(sum_{i>d} sigma_i^2) / ||M||_F for d = 1, 2, 4, ... <= min(C, V)
(``sbjax.studies.lowrank_svd``). The smoothed matrices are dense, so they are never formed:
each is held as sparse + rank one, M = S + a 1^T (logp: S = log1p(N/k) on the observed
entries, a_c = log(k / (n_c + kV)); no bound on C is needed), with ||M||_F exact from the
parts. Spectra come from the exact Gram matrix of the smaller side when min(C, V) <=
``gram_max_dim`` and otherwise from randomized subspace iteration (top max(d) values).

Outputs in OUT: ``target_rank.csv`` (variant, n, V, d, w_error, C, nnz, method, min_count,
k), ``target_rank_contexts.csv`` (one row per (V, n): contexts seen / kept, pairs, nnz),
``fig_target_rank_<variant>.png`` (the Fig. 7 analogue: one panel per V, one curve per n),
``target_rank_meta.json``, ``data/`` (tokenizers and token caches) and ``parts/`` (one
finished (V, n) per file, skipped on a rerun). ``report_section(out, rel)`` gives the
markdown section.

Layout: ``presets.py`` (data overrides + Knobs; a ``test`` preset), ``measure.py`` (data config,
count matrices and W-error curves of one (V, n)), ``run.py`` (``run``), ``report.py``
(``report_section`` and the figures, from the CSVs and the meta record only).
"""

from .measure import curves, data_config, dims_for, part_key
from .presets import PRESETS, Knobs, Preset, get_preset
from .report import (CONTEXTS_CSV, CSV, FIELDS, draw, findings,
                                            read_table, report_section)
from .run import run

__all__ = ["PRESETS", "Knobs", "Preset", "get_preset", "CSV", "CONTEXTS_CSV", "FIELDS",
           "data_config", "dims_for", "part_key", "curves", "run", "read_table", "findings",
           "draw", "report_section"]
