r"""Saturation of small language models (Godey et al. 2024, E1/E3/E4): a width sweep.

  python -m experiments.saturation --preset=cpu --out=out/saturation
  python -m experiments.saturation --preset=quick --out=/tmp/sat --data=DIR_OF_TXT
  python -m experiments.saturation --preset=test --out=/tmp/sat   # seconds, for the tests

Models of widths d (cpu: 16, 32, 48, 64, 96, 128, 192, 256) at a fixed depth and vocabulary
are trained on one text corpus (default: the sample corpus ``sbjax/data/sample_text``, one
sentencepiece tokenizer for all widths) for the same number of steps, with log-spaced
checkpoints (0, 1, 2, 4, ..., 512) and then one every ``ckpt_every`` steps up to the end.
Every run is analysed with ``sbjax.analysis.analyze_run`` (groups loss, anisotropy, spectrum;
one fixed validation sample). Then:

* Figures for all widths together: eval loss vs step coloured by last-layer anisotropy
  (Godey Fig. 3), the sigma_i/sigma_1 heat-map of the head (Fig. 4), KL(sigma || u) of the
  head vs step (Fig. 5), and ``fig_scaling.png`` (loss vs N with the fit; train loss vs step).
* The scaling law L = A / N^alpha + E (``sbjax.studies.scaling``) with N = non-embedding
  parameters (``sbjax.model.non_embedding_params``), fitted on the widths >= fit_min_width,
  once on their final and once on their best (lowest over checkpoints) eval loss; for every
  width the % gap 100 (L - L_fit(N)) / L_fit(N) of its final loss (vs the final fit) and of
  its best loss (vs the best fit).
* Late-rise (saturation) detection: rise = eval_loss(final) - min over checkpoints; a run
  has a late rise when rise > ``rise_tol`` nats. The training loss (metrics.jsonl,
  moving average over ``smooth`` records) gets the same test, so a rise that comes from
  over-fitting (train loss still falling) can be told from saturation (both rise).

Outputs of ``run`` in OUT: ``runs/d<w>/`` (workdirs with ``analysis/``), ``data/``
(tokenizer and token cache), ``saturation_runs.csv`` (one row per width),
``saturation_fit.csv`` (the two fits), ``saturation_train_loss.csv`` (the training loss
records of every width), ``saturation_meta.json``. Finished runs are skipped and analyses
are cached, so a rerun resumes. ``report_section(out, rel)`` (report.py, from those files
only) draws ``fig_loss_anisotropy.png``, ``fig_spectrum_heatmap.png``, ``fig_kl_uniform.png``,
``fig_scaling.png`` and gives the markdown section.

Late rise, paired: every width's per-window losses on the fixed validation windows
(``windows.npz``, ``windows.py``) give the rise statistic of ``sbjax.studies.rise`` with a
paired-bootstrap CI (``rise_stat``, ``rise_ci_lo``/``hi``, ``rise_verdict``) and the CI of the
widths' gap under both counts of N, without and with the head (``gap_final_ci_lo``/``hi``,
``gap_final_with_head_ci_lo``/``hi``); ``scaling_reading`` turns them into the Fig. 1b verdict
(supported / refuted / undecided per count, with its scope).

The planted arms (``--preset=test-planted|cpu-planted|tpu-planted``; ``planted_presets``,
``planted_run``, ``planted_measure``, ``planted_report``): arms of width d and weight decay λ
on the planted mixture language, run by Γ = λ Σ η, with the Rao-Blackwellised expected loss
on fixed validation windows at every checkpoint, the exact floor(d), and a per-arm table
(rise with CI, coincidence with a KL jump and anisotropy, gap to floor, Γ at the rise).

Modules: ``presets`` (PRESETS: test, quick, cpu, tpu), ``run`` (training, analysis),
``measure`` (late-rise test, scaling fits, the CSVs), ``report`` (figures, markdown),
``scaling_reading`` (the generated paragraph on the scaling fit),
``series`` (``--series=WORKDIR --tokens=FILE``: the analysis half on the checkpoints of an
imported series or a run, no training), ``__main__`` (the CLI).
"""

from .measure import detect_rise, fit_rows
from .presets import PRESETS, Knobs, Preset, get_preset
from .report import FIGS, report_section
from .run import run, run_configs

__all__ = ["FIGS", "PRESETS", "Knobs", "Preset", "detect_rise", "fit_rows", "get_preset",
           "report_section", "run", "run_configs"]
