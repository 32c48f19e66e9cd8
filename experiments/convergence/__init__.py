r"""Layer convergence vs model size (Diehl Martinez, Lesci & Buttery 2024).

  python -m experiments.convergence --preset=cpu --out=out/convergence
  python -m experiments.convergence --preset=test --out=/tmp/conv   # seconds, for the tests
  python -m experiments.convergence --series=pythia-70m,pythia-160m --series_tokens=batch.npy \
      --out=out/convergence_pythia

Trains one model per width with dense checkpoints (the log schedule 0, 1, 2, ..., 512
plus >= 20 evenly spaced ones), or takes imported Hugging Face series (directories of
``step<N>`` revisions, e.g. Pythia, with a fixed token batch as an ``.npy`` int array
[n, T+1]); then, on one fixed batch, measures every checkpoint's linear CKA to the final
checkpoint per layer (MLP output, OV circuit; last-token and all-token; biased and
debiased HSIC) and the PER of fc_out and of the per-head OV matrices (and of their
gradients). Definitions: sbjax/studies/convergence.py.

``run`` writes to OUT: ``layers.csv`` / ``layers.md`` (per layer: the first step at which
CKA >= 0.9 of its final value, and PER), ``correlations.csv`` (Pearson / Spearman of that
step with PER), ``bands.csv``, ``models.csv``, ``measure/<model>/`` (the long cka.csv,
per.csv, steps.csv of every checkpoint), ``runs/<model>/`` (the training workdirs) and
``summary.json``. ``report_section(out, rel)`` (report.py, from those files only) draws
``fig_cka_bands.png`` (percentile bands 10/25/50/75/90 over layers of CKA-to-final vs step,
per model, MLP and OV rows; the authors' main figure, for the primary token mode /
estimator), ``fig_cka_bands_<tokens>_<estimator>.png`` for every combination (not for the
test and quick presets) and ``fig_step_vs_per.png``, and gives the markdown section; the
CLI writes it to ``section.md``. Rerunning skips finished training and measurements.

Stabilisation where depth matters (issue 33, item 6): every run also measures a second,
disjoint probe batch of ``n_sequences`` validation windows (``probes``) and writes
``stab_levels.csv`` (the stabilisation step of every layer at levels 0.8, 0.9 and 0.95 on each
batch, ``levels``); the report adds their table and a generated reading (supported / refuted /
undecided, with the batches' agreement and the Γ scope, ``depth_reading``). Presets
``depth-text`` (Shakespeare via --data, d 32 and 128, 4 layers, Γ 2.4), ``depth-planted-g2.4``
and ``depth-planted-g7.9`` (a planted language of context 2, V = 64, 4096 contexts, d 32).

Modules: ``presets`` (PRESETS: test, quick, cpu, cpu-gamma, tpu, depth-*, test-depth-*),
``run`` (configs, training, measurement), ``probes`` (the probe batches), ``summary`` (the
summary CSVs), ``levels`` (stab_levels.csv), ``report`` (figures, markdown),
``depth_reading`` (the stabilisation reading), ``__main__`` (the CLI).
"""

from .presets import PRESETS, Knobs, Preset, get_preset
from .report import report_section
from .run import configs, data_config, run, settings_for
from .summary import FRAC, PAPER_FRAC, layers_markdown

__all__ = ["FRAC", "PAPER_FRAC", "PRESETS", "Knobs", "Preset", "configs", "data_config",
           "get_preset", "layers_markdown", "report_section", "run", "settings_for"]
