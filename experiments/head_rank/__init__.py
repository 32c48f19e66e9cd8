r"""Head rank (Godey et al. 2024, E5): validation loss and top-1 accuracy vs head rank r.

  python -m experiments.head_rank --preset=cpu --out=out/head_rank
  python -m experiments.head_rank --preset=quick --out=/tmp/hr --data=DIR_OF_TXT

On a text corpus (default: the packaged sample corpus ``sbjax/data/sample_text``, see
``experiments.shared.text_corpus``; any directory of .txt files with ``--data``), a
sentencepiece tokenizer is trained and:

* ``full``: dense-head models over the LR grid (the reference; the best one's trunk and
  head are reused);
* protocol (a): the best full run's trunk frozen, a rank-r head trained on it;
* protocol (b): from scratch with a rank-r head;

for r in {1, 2, 4, ..., d}, each over a small LR grid (the best LR is taken by validation
loss), plus mos heads whose parameter count matches the largest lowrank heads (a mos head
holds a V x d matrix, so it cannot be matched to small ranks). Outputs in OUT:
``head_rank.csv`` (every run; see sbjax/studies/rank_sweep.py), ``full_head.npy``,
``fig_head_rank.png`` (Fig. 6 analogue), ``summary.json`` (the monotonicity check) and
``runs/<run>/`` (sbjax workdirs). Rerunning skips finished runs.

Presets (``presets.py``: config overrides + the rank_sweep Plan's knobs): ``test`` (the test
suite: d=4, 6 steps), ``quick`` (smoke runs: d=4, ranks {1} plus the dense head, 12 steps),
``cpu`` (d=64, V=1024, ranks 1..64, 400 steps; <= 20 min on 2 cores), ``tpu`` (Pythia-410m
shape, d=1024, V=8192: ranks 1..1024; give it a corpus larger than Shakespeare with --data).

Layout: ``presets.py``, ``run.py`` (``run``: the sweep, summary.json), ``report.py``
(``report_section``, the figure and the summary, from the CSV only).
"""

from .presets import PRESETS, Knobs, Preset, get_preset
from .report import draw, report_section, summarize
from .run import base_config, make_plan, run, sweep_units

__all__ = ["PRESETS", "Knobs", "Preset", "get_preset", "base_config", "make_plan", "run",
           "sweep_units", "summarize", "draw", "report_section"]
