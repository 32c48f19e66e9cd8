r"""Vocabulary threshold: is Godey et al.'s "about 1000 dimensions" a constant, or does the
rank a head needs grow with the vocabulary V?

  python -m experiments.vocab_threshold --preset=cpu --out=out/vocab_threshold [--data=DIR]

On one corpus (default: the development corpus beside the repository), for each V
in the preset's list a sentencepiece tokenizer of V pieces is trained, and a head-rank sweep
(protocol b: from scratch, rank-r heads, plus the dense full-rank reference; see
sbjax/studies/rank_sweep.py) is run in ``OUT/V<V>/``. Per V:

* r*(V) = the smallest rank whose best-LR validation loss L(r) <= 1.02 L_full, the dense
  run's loss counting as rank d (r* = d means no low-rank head came within 2%: censored);
* r_0.6(V) = the smallest k with W-error(k) <= 0.6 of the dense head
  (W-error(k) = sqrt(sum_{i>k} sigma_i^2) / ||W||_F).

Fit, by least squares on logs: log r = beta log V + c. With n points, x = log V,
y = log r: beta = S_xy / S_xx, se(beta) = sqrt(SSR / (n - 2) / S_xx) (NaN for n < 3).
Outputs: ``vocab_threshold.csv`` (one row per V), ``runs.csv`` (every run, with V),
``fit.json`` and ``fig_vocab_threshold.png``.

Trade-offs of the cpu preset (29 min on 2 cores, measured once: BUILD_NOTES.md): a d=32,
2-layer model, 300 steps, one learning rate, ranks {2, 4, 8, 16} and the dense head (d=32);
the rank grid is a factor of 2, so r* is known to within a factor of 2 and beta's standard
error understates that quantisation. In that run no rank came within tol of the dense head
at any V (r* censored everywhere): the preset is too small to locate r*.

Layout: ``presets.py`` (overrides as in head_rank; knobs: the vocabulary sizes and the sweep
plan), ``measure.py`` (r*, r_0.6, the fit), ``run.py`` (``run``), ``report.py``
(``report_section`` and the figure, from the CSV/JSON files only).
"""

from experiments.vocab_threshold.measure import loglog_fit, thresholds
from experiments.vocab_threshold.presets import (PRESETS, TOL, VOCABS, W_LEVEL, Knobs, Preset,
                                                get_preset)
from experiments.vocab_threshold.report import draw, report_section
from experiments.vocab_threshold.run import make_plan, run

__all__ = ["PRESETS", "VOCABS", "TOL", "W_LEVEL", "Knobs", "Preset", "get_preset", "loglog_fit",
           "thresholds", "make_plan", "run", "draw", "report_section"]
