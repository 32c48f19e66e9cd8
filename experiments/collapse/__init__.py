r"""Linguistic collapse (Wu & Papyan 2024): neural-collapse metrics vs validation loss.

  python -m experiments.collapse --preset=cpu --out=out/collapse
  python -m experiments.collapse --preset=quick --out=/tmp/c --data=DIR_OF_TXT
  python -m experiments.collapse --preset=test --out=/tmp/c     # seconds, for the tests

A grid of GPT-Neo-like models (``sbjax.configs.neo``: learned positions, tied head,
alternating global/local attention), depth L x width d, each trained with weight decay
0 and 0.1 and measured after 1 and 3 epochs, plus a seed-only group (one architecture,
>= 8 data-order seeds). Models of one architecture train together in one vmapped program
(``sbjax.studies.collapse_grid.train_group``: per-member data order, init seed and weight
decay). The learning rate is constant after warm-up, so the 1-epoch model is exactly the
3-epoch run's snapshot at the end of epoch 1. An "epoch" is one pass over a fixed token
budget (the first ``epoch_tokens`` tokens of the training split).

For every model: the three streaming passes (train-split class means and variances, NC4
and the loss on validation), every key of ``sbjax.metrics.collapse_metrics``, and the
settings min_count / cdnv_exponent / weighted_mean / nc4_search, one CSV row per model.

Outputs of ``run`` in OUT: ``collapse_models.csv`` (one row per model), ``collapse_r2.csv``
(R² and Pearson r of every metric vs validation loss over the grid), ``collapse_seeds.csv``
(seed-only group: r, R² and the permutation p-value with ``n_perm`` = 10^4 permutations,
Table 1), ``collapse_tokens.csv`` (per-class CDNV and interference of the most frequent
tokens vs the average token of the best model, Table 5), ``perclass/`` and
``collapse_meta.json``. Finished architecture groups are kept in ``OUT/groups/`` and skipped
on a rerun. ``report_section(out, rel)`` (report.py, from the CSVs only) draws
``fig_collapse_vs_loss.png`` (Fig. 1) and gives the markdown section.

Modules: ``presets`` (PRESETS: test, quick, cpu, tpu), ``run`` (corpus, groups, tables),
``measure`` (one group trained and measured; the R² and token tables), ``report``,
``__main__`` (the CLI).
"""

from experiments.collapse.measure import ANCHORS, COUNT_KEYS, METRICS, SETTINGS, model_config, run_group
from experiments.collapse.presets import PRESETS, Knobs, Preset, get_preset
from experiments.collapse.report import report_section
from experiments.collapse.run import check_same_experiment, groups, run, validate
from experiments.collapse.tables import anchor_rows, model_rows

__all__ = ["ANCHORS", "COUNT_KEYS", "anchor_rows", "model_rows", "METRICS", "PRESETS", "SETTINGS", "Knobs", "Preset",
           "check_same_experiment", "get_preset", "groups", "model_config", "report_section",
           "run", "run_group", "validate"]
