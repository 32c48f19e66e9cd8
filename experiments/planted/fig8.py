"""The exact Fig. 8 / Theorem 5.3 of Godey et al. (2024): floor(r) − H of each planted language
against the raw, centred and √π-weighted W-error(r) of its target logits
(``sbjax.studies.target_werror``) and of the trained dense head of the knee language (the part-1
run of rank d_model, through its mean log-probs per context on ``HEAD_WINDOWS`` fresh windows of
the language, seed [language seed, 7]). Languages with more than ``MAX_ENTRIES`` table entries
are skipped (the SVD is of a C × V matrix)."""

from __future__ import annotations

import math

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.experiment import figure
from sbjax.studies.target_werror import VARIANTS, context_means, language_werror, model_werror

from .measure import context_index, logp_fn

CSV = "planted_fig8.csv"
MAX_ENTRIES = 1 << 22
HEAD_WINDOWS = 512
HEAD_CHUNK = 32


def head_werror(wd, lang, ranks) -> tuple[dict, int]:
  """({variant: W-error at ranks}, contexts seen) of the trained model in ``wd``."""
  cfg, params, _ = ckpt.load_params(wd)
  x = np.asarray(lang.sample(np.random.default_rng([lang.seed, 7]),
                             (HEAD_WINDOWS, cfg.train.seq_len)))
  lq = np.concatenate([np.asarray(logp_fn(cfg.model)(params, x[i:i + HEAD_CHUNK]), np.float64)
                       for i in range(0, len(x), HEAD_CHUNK)])
  c = context_index(x, lang.context, lang.vocab)
  means, counts = context_means(lq.reshape(-1, lq.shape[-1]), c.reshape(-1), lang.n_contexts)
  return model_werror(means, counts, lang.stationary, ranks), int((counts > 0).sum())


def rows(langs: dict, dense_wd, trained_gaps: dict) -> list[dict]:
  """One row per (language, floor rank). ``langs``: {"language" | "mixture": (language, its
  floor rows)}; ``dense_wd``: the knee language's rank-d run (None: not measured)."""
  res = []
  for key, (lang, fl) in langs.items():
    if lang.n_contexts * lang.vocab > MAX_ENTRIES:
      continue
    ranks = [int(r["rank"]) for r in fl]
    we = language_werror(lang, ranks)
    wd = dense_wd if key == "language" else None
    hw, seen = head_werror(wd, lang, ranks) if wd is not None else ({}, 0)
    for i, r in enumerate(fl):
      res.append({"language": key, "kind": lang.info()["kind"], "k": int(lang.info()["rank"]),
                  "rank": int(r["rank"]), "floor_gap": max(float(r["floor_gap"]), 0.0),
                  **{f"werror_{v}": float(we[v][i]) for v in VARIANTS},
                  **{f"head_werror_{v}": float(hw[v][i]) if hw else math.nan for v in VARIANTS},
                  "head_run": wd.name if wd is not None else "", "head_contexts_seen": seen,
                  "trained_gap": trained_gaps.get(int(r["rank"]), math.nan)
                  if key == "language" else math.nan})
  return res


def draw(out, rs: list[dict]) -> None:
  """floor − H against each W-error variant: the target's (solid), the trained head's (dashed)."""
  plt = figure.pyplot()
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
  for ax, v in zip(axes, VARIANTS):
    for j, lang in enumerate(sorted({r["language"] for r in rs})):
      sel = [r for r in rs if r["language"] == lang]
      gaps = [r["floor_gap"] for r in sel]
      ax.plot([r[f"werror_{v}"] for r in sel], gaps, "o-", color=f"C{j}",
              label=f"{lang} ({sel[0]['kind']}, k={int(sel[0]['k'])}): target")
      hw = [float(r[f"head_werror_{v}"]) for r in sel]
      if all(math.isfinite(x) for x in hw):
        ax.plot(hw, gaps, "s--", color=f"C{j}", mfc="none", label=f"{lang}: trained dense head")
    ax.set_xlabel(f"W-error(r), {v}")
    ax.set_yscale("symlog", linthresh=1e-3)
  axes[0].set_ylabel("floor(r) − H (nats)")
  axes[0].legend(fontsize=7)
  figure.save(fig, out, "fig_planted_fig8", "exact floors against the W-error of the target and "
              "of the trained dense head (Godey et al. Fig. 8, exact)")
