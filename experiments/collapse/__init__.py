r"""Linguistic collapse (Wu & Papyan 2024): neural-collapse metrics vs validation loss.

  python -m experiments.collapse --preset=cpu --out=out/collapse
  python -m experiments.collapse --preset=quick --out=/tmp/c --data=DIR_OF_TXT
  python -m experiments.collapse --preset=test --out=/tmp/c     # seconds, for the tests

A grid of GPT-Neo-like models (``sbjax.configs.neo``: learned positions, tied head,
alternating global/local attention), depth L x width d x weight decay λ, each measured at two
snapshots (cpu: after 1 and 3 epochs of 262k tokens, 1536 steps of 8 x 64), plus seed-only
groups (one per shape, ``Knobs.seed_arch`` and ``extra_seed_archs``; at cpu 16 data-order seeds
of each of L1-d32 and L2-d64), each asking whether a metric's correlation with the loss at fixed
shape differs from 0 (95% Fisher-z interval of r). Models of one architecture train together
in one vmapped program (``sbjax.studies.collapse_grid.train_group``: per-member data order,
init seed and weight decay). The learning rate is constant after warm-up, so an earlier snapshot is exactly the
model of a shorter run. An "epoch" is one pass over a fixed token budget (the first
``epoch_tokens`` tokens of the training split). ``collapse_meta.json`` records the
weight-decay strength Γ = λ·Σ lr (a decay with Γ << 1 does nothing).

For every snapshot: the three streaming passes (train-split class means and variances, NC4
and the loss on validation) once, then every key of ``sbjax.metrics.collapse_metrics`` at
each ``min_count`` of the preset (1 and 20), one CSV row per (snapshot, min_count).

Counting: a run (one member of a group) gives one point per R² (its last snapshot,
``points=last``); the R² over all snapshots (``points=all``) is reported beside it, labelled
as such (snapshots of one run are not independent models).

Outputs of ``run`` in OUT: ``collapse_models.csv`` (one row per snapshot and min_count;
columns ``run``, ``last_snapshot``, ``min_count``, every metric, ``unc3_reason``),
``collapse_r2.csv`` (R² and Pearson r of every metric vs validation loss per (min_count,
points)), ``collapse_anchors.csv`` (the like-for-like table: our R² and sign, one point per
run, against the authors' R² "computed from the authors' results", agree/disagree; log10 of
the mean CDNV, NC4, UNC3 raw and guarded, raw and bias-corrected norm CoV, NC3, GNC2),
``collapse_seeds.csv`` (per seed-only group and min_count: r with its 95% Fisher-z interval,
``ci_verdict`` = r > 0 / r < 0 / not distinguishable from 0, R², the permutation p-value with
``n_perm`` = 10^4 permutations, the loss's mean and SD over seeds; Table 1),
``collapse_tokens.csv`` (per-class CDNV and interference of
the most frequent tokens vs the average token of the best model, Table 5), ``perclass/``,
``collapse_meta.json``, and with ``Knobs.ceiling`` the collapse ceiling of a planted
language (``ceiling.py``: ``collapse_ceiling.csv``, ``collapse_ceiling_trained.csv``).
Finished architecture groups are kept in ``OUT/groups/`` and skipped on a rerun.
``collapse_meta.json`` is written when a call starts, after every group and at its end: the
preset's ``groups``, this call's ``started``/``ended``/``trained``/``stopped`` (a budget stop's
text)/``not_run``/``estimates``, and ``runs``, the record of every call into the folder
(``experiments.shared.with_history``). ``report_section(out, rel)`` (report.py, from the CSVs
only) draws ``fig_collapse_vs_loss.png`` (Fig. 1) and ``fig_collapse_ceiling.png`` and gives
the markdown section; ``write_section(out)`` writes OUT/section.md, after a whole run or a
budget stop (then of the finished groups, marked partial, tables recomputed over them).

Modules: ``presets`` (PRESETS: test, quick, cpu, tpu; gpu and gpu-grid on shipped token
files, with their twins gpu-test and gpu-grid-test), ``budget`` (the time estimate after 200
steps and the clean stop before ``Knobs.budget_s``), ``run`` (corpus, groups, tables),
``measure`` (one group trained and measured; metric lists and the authors' anchors),
``tables`` (R², anchors, seeds, tokens), ``ceiling`` (the planted language's ceiling),
``report`` / ``report_ceiling``, ``series`` (``--series=WORKDIR --tokens=FILE``: the collapse
pass over the checkpoints of an imported series or a run, no training), ``__main__`` (the CLI).
"""

from .measure import ANCHORS, COUNT_KEYS, METRICS, SETTINGS, model_config, run_group
from .presets import PRESETS, Knobs, Preset, get_preset
from .report import report_section, write_section
from .run import check_same_experiment, groups, run, validate
from .tables import anchor_rows, model_rows

__all__ = ["ANCHORS", "COUNT_KEYS", "anchor_rows", "model_rows", "METRICS", "PRESETS", "SETTINGS", "Knobs", "Preset",
           "check_same_experiment", "get_preset", "groups", "model_config", "report_section",
           "run", "run_group", "validate", "write_section"]
