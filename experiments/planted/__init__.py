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

Part 2 (breaking the bottleneck). A high-rank language, by default (quick and cpu presets)
the planted MoS language (``source=planted_mos``: P(w|c) = Σ_m π_m softmax(α(R_m u_c)·y_w/√k
+ b_w), one shared Y, M rotations R_m; here V = 256, M = 8, k = 4, α = 8) which a MoS head
with component dimension e = k + 1 and linear components represents exactly, while its
centred log P has rank ≈ V − 1. Every head gets the same trunk (d = 16): ``mos`` (M' = 16
components of e = k + 1: over-complete in components, which random starts fit far better
than the exact-size M = 8 head) against ``lowrank`` at the matched head parameter count
(``sbjax.heads.head_param_count``; r = 11), plus r = d and a matched ``sigsoftmax`` (cpu).
Every run trains on the Rao-Blackwellised loss (``train.objective`` of ``Knobs.mix``;
``sbjax.losses.expected_loss``) at each learning rate of ``mix_lrs`` and seed of ``mix_seeds``, one population per head
(``sbjax.train.population``); the exact lowrank floor is fitted at each rank. The report
takes each head at its best lr and gives the mean gap to H over seeds, the seed spread
(max − min), and the verdict (``mix_stats``): MoS − H ≤ 0.03, matched lowrank − H ≥ its
floor gap, and whether the margin exceeds 5× the spread. Whether MoS wins is reported, not
assumed. The test preset keeps the older ``planted_mix`` (independent output embeddings per
component). ``--parts=mix`` runs part 2 alone.

Part 2 in cells (issue 33 item 5; presets ``test-mos-seeds``, ``cpu-mos-seeds``, part 2 alone):
languages (``Knobs.mix_langs``: the knee language and the MoS language) x training objectives
(``mix_objectives``: sampled targets, the headline, and the Rao-Blackwellised loss beside it) x
arms (MoS 16 × 5, the parameter-matched lowrank, MoS at the lowrank head's FLOPs), each arm one
population of init seeds x lrs; each arm's lr is chosen on an independent selection stream
(``select_batches``; ``measure.selection_batches``) and reported on the validation stream;
planted_mix.csv then has the columns lang, objective, run, head_flops
(``sbjax.studies.head_flops``) and sel_*; ``mos_cells`` gives each cell's Welch verdicts
(``sbjax.studies.welch``) and ``mos_cells_report`` the table, figure and paragraph.

Outputs in OUT: ``planted.csv`` (rank, eval_loss, eval_acc, expected_loss, floor, H, gap,
floor_gap), ``planted_floor.csv`` (the floor fit with its convergence record),
``planted_mix.csv`` (one row per run, with its arm, lr and seed), ``planted_mix_floor.csv``,
``planted_meta.json``, ``fig_planted_knee.png``, ``fig_planted_mix.png``,
``runs/`` (workdirs, a population's members in ``member_<i>``; finished runs are skipped on a
rerun).

Layout: ``presets.py`` (PRESETS: config overrides + Knobs), ``configs.py`` (the Configs of
both parts), ``measure.py`` (the Rao-Blackwellised loss), ``run.py`` (``run``: floors, training,
CSVs), ``mix_stats.py`` (part 2's seed statistics), ``report.py`` (``report_section`` and the
figures, from the CSVs only).
"""

from .configs import arm_of, knee_configs, matched_rank, mix_configs, validate
from .measure import context_index, expected_nll_sum, measure
from .presets import PRESETS, Knobs, Preset, get_preset
from .report import draw, report_section, summarize
from .run import run

__all__ = ["PRESETS", "Knobs", "Preset", "get_preset", "arm_of", "knee_configs", "mix_configs",
           "matched_rank", "validate", "context_index", "expected_nll_sum", "measure", "run",
           "summarize", "draw", "report_section"]
