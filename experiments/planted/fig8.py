"""The exact Fig. 8 / Theorem 5.3 of Godey et al. (2024) on the cached exact floors: floor(r) − H
of each planted language of the run (planted_floor.csv; planted_mix_floor.csv) against the raw,
centred and √π-weighted W-error(r) of its target logits (``sbjax.studies.target_werror``), and
the W-error at which the floor gap opens (floor − H > the knee tolerance).

Beside the target's, the same three W-errors of the trained dense head of the knee language:
the part-1 run whose head rank is d_model (runs/r<d>: a rank-d factorised head restricts nothing,
the dense head's function class), through its mean log-probs per context
(``target_werror.context_means`` / ``model_werror``) on ``HEAD_WINDOWS`` fresh windows of the
language (independent chains from the stationary distribution, seed [language seed, 7]), and
the sentence says at what W-error of the trained head the floor gap opens. (The mixture's part
2 has no rank-d run at quick size: none is reported for it.)

The languages are rebuilt from planted_meta.json (``language``, ``mixture``: the parameters that
define them; nothing is fitted here), so this reads only what ``run`` wrote (and the dense run's
last checkpoint). Languages with more than ``MAX_ENTRIES`` table entries are skipped (the SVD is
of a C × V matrix)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from ..shared import read_rows, save_figure, upath, write_rows  # noqa: E402
from sbjax import checkpoint as ckpt  # noqa: E402
from sbjax.data.sources import language_of  # noqa: E402
from sbjax.losses import context_ids  # noqa: E402
from sbjax.model import Model  # noqa: E402
from sbjax.studies.target_werror import (VARIANTS, context_means, gap_opens,  # noqa: E402
                                         language_werror, model_werror)

CSV = "planted_fig8.csv"
FIG = "fig_planted_fig8.png"
MAX_ENTRIES = 1 << 22
PARTS = (("language", "planted_floor.csv"), ("mixture", "planted_mix_floor.csv"))
HEAD_WINDOWS = 512  # windows of seq_len + 1 for the trained head's mean log-probs per context
HEAD_CHUNK = 32


def dense_run(out, meta: dict):
  """The workdir of the knee language's trained dense head (rank d_model), or None."""
  s = meta.get("settings", {})
  d = s.get("d_model")
  wd = upath(out) / "runs" / f"r{d}"
  ok = d is not None and d in s.get("ranks", ()) and (wd / "checkpoints").exists()
  return wd if ok and ckpt.list_steps(wd) else None


def head_werror(wd, lang, ranks) -> tuple[dict, int]:
  """({variant: W-error at ranks}, contexts seen) of the trained model in ``wd`` (module doc)."""
  cfg, params, _ = ckpt.load_params(wd)
  t = cfg.train.seq_len
  x = np.asarray(lang.sample(np.random.default_rng([lang.seed, 7]), (HEAD_WINDOWS, t)))
  model = Model(cfg.model)
  logp = jax.jit(lambda p, b: jax.nn.log_softmax(model.apply(p, b), axis=-1))
  lq = np.concatenate([np.asarray(logp(params, x[i:i + HEAD_CHUNK]), np.float64)
                       for i in range(0, len(x), HEAD_CHUNK)])
  c = np.asarray(context_ids(x, lang.context, lang.vocab), np.int64)
  means, counts = context_means(lq.reshape(-1, lq.shape[-1]), c.reshape(-1), lang.n_contexts)
  return model_werror(means, counts, lang.stationary, ranks), int((counts > 0).sum())


def _trained_gaps(out) -> dict:
  """{rank: expected_loss − H} of the part-1 runs (planted.csv), {} without it."""
  path = upath(out) / "planted.csv"
  return {int(r["rank"]): float(r["gap"]) for r in read_rows(path)} if path.exists() else {}


def rows(out: Path) -> list[dict]:
  """One row per (language, cached floor rank): floor_gap and the three target W-errors."""
  out = upath(out)
  meta = json.loads((out / "planted_meta.json").read_text())
  res = []
  for key, csv in PARTS:
    info = meta.get(key)
    if not info or not (out / csv).exists() or \
        int(info.get("n_contexts", 0)) * int(info.get("vocab", 0)) > MAX_ENTRIES:
      continue
    fl = read_rows(out / csv)
    ranks = [int(r["rank"]) for r in fl]
    lang = language_of(info)
    we = language_werror(lang, ranks)
    wd = dense_run(out, meta) if key == "language" else None
    hw, seen = head_werror(wd, lang, ranks) if wd is not None else ({}, 0)
    tg = _trained_gaps(out) if key == "language" else {}
    for i, r in enumerate(fl):
      res.append({"language": key, "kind": info["kind"], "k": int(info["rank"]),
                  "rank": int(r["rank"]), "floor_gap": max(float(r["floor_gap"]), 0.0),
                  **{f"werror_{v}": float(we[v][i]) for v in VARIANTS},
                  **{f"head_werror_{v}": float(hw[v][i]) if hw else math.nan for v in VARIANTS},
                  "head_run": wd.name if wd is not None else "", "head_contexts_seen": seen,
                  "trained_gap": tg.get(int(r["rank"]), math.nan)})
  return res


def _draw(out, rs: list[dict]) -> None:
  """fig_planted_fig8.png: floor − H against each W-error variant, the target's (solid) and
  the trained dense head's (dashed, where measured)."""
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
  for ax, v in zip(axes, VARIANTS):
    for j, lang in enumerate(sorted({r["language"] for r in rs})):
      sel = [r for r in rs if r["language"] == lang]
      ax.plot([r[f"werror_{v}"] for r in sel], [r["floor_gap"] for r in sel], "o-", color=f"C{j}",
              label=f"{lang} ({sel[0]['kind']}, k={int(sel[0]['k'])}): target")
      hw = [r[f"head_werror_{v}"] for r in sel]
      if all(math.isfinite(x) for x in hw):
        ax.plot(hw, [r["floor_gap"] for r in sel], "s--", color=f"C{j}", mfc="none",
                label=f"{lang}: trained dense head ({sel[0]['head_run']})")
    ax.set_xlabel(f"W-error(r), {v}")
    ax.set_yscale("symlog", linthresh=1e-3)
  axes[0].set_ylabel("floor(r) − H (nats)")
  axes[0].legend(fontsize=7)
  fig.suptitle("exact floors against the W-error of the target and of the trained dense head "
               "(Godey et al. Fig. 8, exact)")
  fig.tight_layout()
  save_figure(fig, upath(out) / FIG, dpi=100)
  plt.close(fig)


def write(out: Path) -> list[dict]:
  """planted_fig8.csv and fig_planted_fig8.png (nothing without a language in the meta)."""
  rs = rows(out)
  if rs:
    write_rows(upath(out) / CSV, rs)
    _draw(out, rs)
  return rs


def _w(v) -> str:
  return f"{v:.3f}" if math.isfinite(v) else "–"


def _opens(sel: list[dict], col: str, tol: float) -> str:
  """Where the floor gap opens against the W-error columns ``col``<variant> of ``sel``."""
  gaps = [r["floor_gap"] for r in sel]
  iv = {v: gap_opens([r[f"{col}{v}"] for r in sel], gaps, tol) for v in VARIANTS}
  if all(g > tol for g in gaps):
    return ("the gap is open at every cached rank (smallest W-error: "
            + ", ".join(f"{v} {_w(iv[v][1])}" for v in VARIANTS) + ")")
  if all(g <= tol for g in gaps):
    return ("the gap never opens at the cached ranks (largest W-error: "
            + ", ".join(f"{v} {_w(iv[v][0])}" for v in VARIANTS) + ")")
  return ("the gap opens between W-error "
          + ", ".join(f"{_w(iv[v][0])} and {_w(iv[v][1])} ({v})" for v in VARIANTS))


def sentence(rs: list[dict], tol: float) -> str:
  """Per language, the W-error interval where the floor gap opens (> tol), in each variant:
  of the target, and of the trained dense head where it was measured."""
  parts = []
  for lang in sorted({r["language"] for r in rs}):
    sel = [r for r in rs if r["language"] == lang]
    ranks = ", ".join(str(int(r["rank"])) for r in sel)
    text = (f"{lang} ({sel[0]['kind']}, k = {int(sel[0]['k'])}, ranks {ranks}): target: "
            + _opens(sel, "werror_", tol))
    if all(math.isfinite(float(r.get("head_werror_raw", math.nan))) for r in sel):
      text += (f"; trained dense head ({sel[0]['head_run']}, mean log-probs over "
               f"{int(sel[0]['head_contexts_seen'])} contexts): " + _opens(sel, "head_werror_", tol))
    else:
      text += "; no trained dense head measured for it"
    parts.append(text)
  return (f"Exact Fig. 8: floor(r) − H against the W-error(r) of the target logits and of the "
          f"trained dense head's (the loss gap 'opens' when floor − H > {tol}; Godey et al. see "
          "the loss rise once a head's W-error passes ≈ 0.6): " + "; ".join(parts) + ".")


def lines(out: Path, rel: str, tol: float) -> list[str]:
  """The report's table, figure and sentence (from planted_fig8.csv; [] without it)."""
  out = upath(out)
  if not (out / CSV).exists():
    return []
  rs = read_rows(out / CSV)
  head = ["", "### Exact floors against the W-error of the target and of the trained dense head "
          "(Fig. 8 / Theorem 5.3)", "", f"![floor gap vs W-error]({rel}/{FIG})", "",
          "W-error(r) of the target log P and of the trained dense head's mean log-probs per "
          "context (raw, centred over the vocabulary, and centred with each context weighted by "
          "√π_c); trained r − H: the rank-r run's expected loss − H.", "",
          "| language | rank | floor − H | trained r − H | target W-error raw | centred | "
          "√π-weighted | dense head W-error raw | centred | √π-weighted |",
          "|---|---|---|---|---|---|---|---|---|---|"]
  body = [f"| {r['language']} | {int(r['rank'])} | {r['floor_gap']:.4f} | "
          f"{_w4(r.get('trained_gap'))} | {r['werror_raw']:.4f} | {r['werror_centred']:.4f} | "
          f"{r['werror_weighted']:.4f} | {_w4(r.get('head_werror_raw'))} | "
          f"{_w4(r.get('head_werror_centred'))} | {_w4(r.get('head_werror_weighted'))} |"
          for r in rs]
  return head + body + ["", sentence(rs, tol)]


def _w4(v) -> str:
  """A cell read back from CSV: 4 decimals, '–' when empty or NaN."""
  try:
    v = float(v)
  except (TypeError, ValueError):
    return "–"
  return f"{v:.4f}" if math.isfinite(v) else "–"
