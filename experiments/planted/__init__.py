"""Experiment 5, ``planted``: the exact rank floor and the knee on a planted-rank language.

  python -m experiments.planted --preset=cpu --out=out/planted    # test | quick | cpu | tpu

Part 1 (the knee). The planted language (V=256, planted rank k=8, a bigram chain) has
logits ``alpha U Vᵀ/√k + 1 bᵀ`` of rank k + 1 and exact entropy H. For every head rank r a
model with a bias-free rank-r head (``lowrank``) is trained, and its loss is compared with the
exact floor (``sbjax.studies.floor``)

    floor(r) = min_{rank L ≤ r} Σ_c π_c CE(P(·|c), softmax(L_c)),   floor(r) = H for r ≥ k + 1.

The trained loss is measured on the validation stream in two ways: ``eval_loss``, the usual
mean of −log q_t(x_{t+1}), and ``expected_loss``, its Rao-Blackwellised form
Σ_t Σ_w P(w|c_t)(−log q_t(w)) / n (same expectation, the sampling noise of the target token
removed; ``expected_loss − H`` is the mean KL(P(·|c_t) ‖ q_t) over validation positions). The
knee is the smallest r with ``expected_loss − H ≤ tol`` (0.05 nats). Checks (reported):
knee = k + 1 ± 1; every r ≥ k + 1 within tol of H; every r ≤ k/2 above H by at least
floor(r) − H − 0.02.

Part 2 (high rank). A mixture of M softmaxes of planted rank k each (``PlantedMixture``) has a
high-rank log-probability matrix. ``mos`` heads (M components) are compared with ``lowrank``
heads whose head parameter count is matched (``sbjax.heads.head_param_count``), plus the
lowrank floor at that rank. The mos runs use their own ``model.init_std`` (``mos_init_std``;
see the Knobs). At matched head parameters the lowrank rank r is about the mos width d, so
r ≥ M k + 1 spans every component and only the log-sum-exp nonlinearity is out of its reach:
the floor gap at r is small (0.03 nats for the cpu mixture, at most ~0.08 over mixtures a d=16
mos head can represent), and whether mos beats lowrank is reported, not assumed.

Outputs in OUT: ``planted.csv`` (rank, eval_loss, eval_acc, expected_loss, floor, H, gap,
floor_gap), ``planted_floor.csv`` (the floor fit with its convergence record),
``planted_mix.csv``, ``planted_meta.json``, ``fig_planted_knee.png``, ``fig_planted_mix.png``,
``runs/`` (workdirs; finished runs are skipped on a rerun).

Layout: ``presets.py`` (PRESETS: config overrides + Knobs), ``configs.py`` (the Configs of
both parts), ``measure.py`` (the Rao-Blackwellised loss), ``run.py`` (``run``: floors, training,
CSVs), ``report.py`` (``report_section`` and the figures, from the CSVs only).
"""

from experiments.planted.configs import knee_configs, matched_rank, mix_configs, validate
from experiments.planted.measure import context_index, expected_nll_sum, measure
from experiments.planted.presets import PRESETS, Knobs, Preset, get_preset
from experiments.planted.report import draw, report_section, summarize
from experiments.planted.run import run

__all__ = ["PRESETS", "Knobs", "Preset", "get_preset", "knee_configs", "mix_configs",
           "matched_rank", "validate", "context_index", "expected_nll_sum", "measure", "run",
           "summarize", "draw", "report_section"]
