r"""MoS on text (issue 33 item 5): a mixture-of-softmaxes head against the dense head and the
parameter-matched lowrank head, on a text corpus, over init seeds.

  python -m experiments.mos_text --preset=cpu --out=out/mos_text --data=DIR_OF_TXT

One trunk shape (cpu: V = 1024 sentencepiece pieces, d = 32, 2 layers), three heads: dense
(V×d), MoS (M linear components of dimension e sharing one V×e matrix, ``sbjax.heads.mos``)
and lowrank (W = A·B) at the rank whose head parameter count is closest to the MoS head's.
Each head is one population whose members are the init seeds (``sbjax.train.population``: one
compile per head), all on the same data order and lr. The cpu MoS shape (2 × 16) has the
parameters of lowrank r = 17 and the head FLOPs of the dense head, so the two comparisons are
at matched parameters (MoS vs lowrank) and at matched FLOPs (MoS vs dense). The verdicts are
Welch intervals over seeds (``sbjax.studies.welch``).

Outputs in OUT: ``mos_text.csv`` (one row per run: arm, head, seed, lr, head_params,
head_flops, n_params, eval_loss, ...), ``mos_text_meta.json``, ``fig_mos_text.png``, ``data/``
(the tokenizer and token cache) and ``runs/`` (one population per arm; finished runs are read
back on a rerun).

Layout: ``presets.py`` (overrides + Knobs), ``run.py`` (``run``), ``report.py``
(``report_section``, ``paragraph``, the figure; from the CSV and the meta record only).
"""

from .presets import PRESETS, Knobs, Preset, get_preset
from .report import CSV, META, arms, comparisons, draw, paragraph, report_section
from .run import arm_configs, matched_rank, run

__all__ = ["PRESETS", "Knobs", "Preset", "get_preset", "CSV", "META", "arms", "comparisons",
           "draw", "paragraph", "report_section", "arm_configs", "matched_rank", "run"]
