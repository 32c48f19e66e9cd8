"""The collapse ceiling of a planted language, and trained models as they approach it.

On a planted-rank language (``Knobs.ceiling = (V, k)``, context 1, exact P and π) the
Bayes-optimal model is known exactly (``sbjax.studies.collapse_ceiling``): its NC1–NC4 are
the ceiling, written for both canonical factorisations to ``collapse_ceiling.csv``. One
architecture (``Knobs.ceiling_arch``) is then trained on tokens sampled from the language,
one member per weight decay, and measured at the snapshot steps ``Knobs.ceiling_steps``:
``collapse_ceiling_trained.csv`` holds every collapse metric with the gap to the entropy,

    gap = val_loss − (−(1/N) Σ_i log P(y_i | x_i))      (the same validation tokens),

i.e. the sampled KL(P ‖ model) ≥ 0 up to sampling noise. The figure plots each metric
against the gap, with the ceiling's values as horizontal lines.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .measure import METRICS, model_config, scalar, train_config, windows
from .presets import Preset
from ..shared import upath, write_rows
from sbjax.data.dataset import Dataset
from sbjax.data.planted import PlantedLanguage
from sbjax.studies import collapse_ceiling as CC
from sbjax.studies import collapse_grid as cg


def language(p: Preset) -> PlantedLanguage:
  vocab, rank = p.knobs.ceiling
  return PlantedLanguage(vocab=vocab, rank=rank, seed=0)


def true_nll(lang: PlantedLanguage, wins: np.ndarray) -> float:
  """−mean log P(y | x) over the targets of packed windows [n, T+1] (context 1)."""
  if lang.context != 1:
    raise ValueError("the ceiling experiment needs a context-1 planted language")
  return float(-np.mean(lang.log_probs[wins[:, :-1], wins[:, 1:]]))


def ceiling_rows(lang: PlantedLanguage) -> list[dict]:
  rows = []
  for v in CC.VARIANTS:
    r = CC.ceiling_metrics(lang, v)
    rows.append({"vocab": lang.vocab, "planted_rank": lang.rank, "alpha": lang.alpha,
                 "zipf": lang.zipf, **{k: scalar(r[k]) if k != "variant" else r[k]
                                       for k in r if np.ndim(r[k]) == 0}})
  return rows


def trained_rows(p: Preset, lang: PlantedLanguage, verbose: bool = True) -> list[dict]:
  """Train the ceiling architecture (one member per weight decay) on the language and
  measure every snapshot (min_count 1)."""
  k = p.knobs
  seq_len, batch = p.overrides["train.seq_len"], p.overrides["train.batch_size"]
  tr = lang.sample(np.random.default_rng([k.ceiling[0], 1]), k.ceiling_tokens + 1)
  va = lang.sample(np.random.default_rng([k.ceiling[0], 2]), max(k.ceiling_tokens // 8, 4 * seq_len) + 1)
  n_layers, d = k.ceiling_arch
  mc = model_config(p, n_layers, d, lang.vocab)
  members = [cg.Member(seed=0, data_seed=0, weight_decay=float(wd)) for wd in k.weight_decays]
  dss = [Dataset(tr, va, seq_len=seq_len, global_batch_size=batch, seed=m.data_seed,
                 vocab_size=lang.vocab, process_index=0, process_count=1) for m in members]
  steps = tuple(k.ceiling_steps)
  t0 = time.perf_counter()
  snaps, _ = cg.train_group(mc, train_config(p, max(steps)), members, dss, steps,
                            name=f"ceiling-L{n_layers}-d{d}", log_every=(max(steps) // 4 if verbose else 0))
  trw, vaw = windows(tr, seq_len), windows(va, seq_len)
  h = true_nll(lang, vaw)
  rows = []
  for s in steps:
    res = cg.collapse_pass(mc, snaps[s], trw, vaw, chunk=k.chunk)
    for m, r in zip(members, res):
      rows.append({"run": f"ceiling-L{n_layers}-d{d}-wd{m.weight_decay:g}", "step": s,
                   "n_layers": n_layers, "d_model": d, "weight_decay": m.weight_decay,
                   "val_loss": r["val_loss"], "val_true_nll": h, "gap": r["val_loss"] - h,
                   **{kk: scalar(r.get(kk, float("nan"))) for kk in METRICS},
                   "n_classes": r.get("n_classes", 0), "error": r["error"],
                   "seconds": round(time.perf_counter() - t0, 1)})
  return rows


def run_ceiling(out: Path, p: Preset, verbose: bool = True) -> None:
  """collapse_ceiling.csv and (with ceiling_steps) collapse_ceiling_trained.csv in ``out``
  (kept on a rerun); nothing without ``Knobs.ceiling``."""
  if not p.knobs.ceiling:
    return
  lang = language(p)
  write_rows(upath(out) / "collapse_ceiling.csv", ceiling_rows(lang))
  if p.knobs.ceiling_steps and not (upath(out) / "collapse_ceiling_trained.csv").exists():
    write_rows(upath(out) / "collapse_ceiling_trained.csv", trained_rows(p, lang, verbose))
