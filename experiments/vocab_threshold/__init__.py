r"""Vocabulary threshold: is Godey et al.'s "about 1000 dimensions" a constant, or does the
rank a head needs grow with the vocabulary V?

  python -m experiments.vocab_threshold --preset=cpu --out=out/vocab_threshold [--data=DIR]

On one corpus (default: the packaged sample corpus, ``sbjax/data/sample_text``), for each V
in the preset's list a sentencepiece tokenizer of V pieces is trained, and a head-rank sweep
(protocol b: from scratch, rank-r heads, plus the dense full-rank reference; see
sbjax/studies/rank_sweep.py) is run in ``OUT/V<V>/``. Per V:

* r*(V) = the smallest rank whose best-LR validation loss L(r) <= L_ref + TOL_CHAR · c(V),
  c(V) = characters per token of this V's validation stream (a tolerance in nats per
  character, ``tolerance.py``), L_ref = the protocol-(a) rank-d head when the plan has
  protocol a (same parameterisation and steps as the rank-r heads), else the dense head
  (the dense run counts as rank d; r* = d means censored);
* r_0.6(V) = the smallest k with W-error(k) <= 0.6 of the centred dense head W − 1 w̄ᵀ
  (W-error(k) = sqrt(sum_{i>k} sigma_i^2) / ||W||_F); the uncentred one is r_werror06_raw.

* with the preset's n-gram knobs (cpu): the exact add-k bigram r*(V) beside it, no training
  (``ngram.py``: floor.py's rank-r fits of the smoothed bigram of the train tokens, scored on
  the validation counts, the same tolerance; per-rank rows in ``ngram.csv``).

Fit, by least squares on logs: log r = beta log V + c. With n points, x = log V,
y = log r: beta = S_xy / S_xx, se(beta) = sqrt(SSR / (n - 2) / S_xx) (NaN for n < 3).
Outputs: ``vocab_threshold.csv`` (one row per V), ``runs.csv`` (every run, with V),
``fit.json``, ``fig_vocab_threshold.png`` and, with n-gram knobs, ``ngram.csv``.

The cpu preset (issue 18): V in {256, 512, 1024, 2048}, one d=64, 2-layer trunk per V (the
dense run), then protocol (a) heads r in {2, 4, 8, 12, 16, 24, 32, 48, 64} on that frozen
trunk, and the exact bigram r* at ranks {4, …, 128}. (The older preset, V = 512..8192 with
protocol b against the dense head, took 29 min and was censored at every V.)

The bigram r*(V, N) presets (issue 33, item 3; ``--preset=cpu-bigram-n``, its test size
``test-bigram-n``) train nothing: the exact bigram r* at V in {256, 1024, 2048} x data
fractions {1/4, 1/2, 1}, every fit run to gtol 1e-5 or flagged, and whether r*(V) moves with
the data size (``bigram_n.py``, ``bigram_n_run.py``, ``bigram_n_report.py``;
``bigram_n_cells.csv``, ``bigram_n_fits.csv``, ``bigram_n.json``, ``fig_bigram_n.png``).
The protocol-(a) heads at each head lr side by side: ``head_lrs.py``.

The accelerator preset (issue 32, ``--preset=gpu``, twin ``gpu-test``) trains on shipped token
files (``--data=DIR`` of V<V>/), its trunk's best validation checkpoint carries the protocol-(a)
heads, which train as ONE population of padded heads per V (``rank_sweep.Plan.head_population``,
``sbjax.heads.padded_lowrank``), and every run prints its time estimate and stops cleanly before
the preset's budget (exit status 75; a rerun resumes): ``budget.py``.

Layout: ``presets.py`` (overrides as in head_rank; knobs: the vocabulary sizes and the sweep
plan), ``measure.py`` (r*, r_0.6, the fit), ``run.py`` (``run``), ``report.py``
(``report_section`` and the figure, from the CSV/JSON files only).
"""

from .measure import loglog_fit, thresholds
from .presets import (PRESETS, TOL, TOL_CHAR, VOCABS, W_LEVEL, Knobs,
                                                Preset, get_preset)
from .report import draw, report_section
from .run import make_plan, run

__all__ = ["PRESETS", "VOCABS", "TOL", "TOL_CHAR", "W_LEVEL", "Knobs", "Preset", "get_preset", "loglog_fit",
           "thresholds", "make_plan", "run", "draw", "report_section"]
