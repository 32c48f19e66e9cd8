r"""W-error vs loss (Godey et al. 2024, E7 / Fig. 8): head-rank runs against W-error(r).

  python -m experiments.werror_loss --preset=cpu --out=out/werror_loss \
      [--head_rank_dir=out/head_rank] [--data=DIR]

Reads the head-rank sweep (``experiments.head_rank``; its directory defaults to
``OUT/../head_rank`` and is trained first, with the same preset, if it is not finished) and
puts each best-LR rank-r run's validation loss against

    W-error(r) = sqrt(sum_{i>r} sigma_i^2) / ||W||_F

of the full-rank (dense) head W (``full_head.npy``, V x d; sigma from an SVD). Outputs in
OUT: ``werror_loss.csv`` (protocol, rank, w_error, eval_loss, eval_acc, lr, rel_excess =
eval_loss / L_full - 1), ``werror_curve.csv`` (d, w_error for d = 0..n), ``summary.json`` and
``fig_werror_loss.png``.

Comparison with the paper (Fig. 8: loss rises once the W-error of the model's own head passes
about 0.6): per protocol, r* = the smallest rank whose loss is within 2% of the full-rank
loss, and the next smaller rank r-; the paper's threshold is consistent with the data when
W-error(r*) <= 0.6 <= W-error(r-).

Layout: ``presets.py`` (the head-rank presets + threshold and tolerance; the W-error curve and r* are ``sbjax.studies.werror``),
``run.py`` (``run``: CSVs and summary.json), ``report.py``
(``report_section`` and the figure, from those files only).
"""

from sbjax.studies.werror import rank_at, threshold_rank, w_error_curve
from .presets import PRESETS, THRESHOLD, TOL, Knobs, Preset, get_preset
from .report import draw, report_section
from .run import compute, head_rank_dir, run

__all__ = ["PRESETS", "THRESHOLD", "TOL", "Knobs", "Preset", "get_preset", "w_error_curve",
           "rank_at", "threshold_rank", "compute", "head_rank_dir", "run", "draw",
           "report_section"]
