"""Summaries of layer convergence (Diehl Martinez, Lesci & Buttery 2024), numpy only, from
the long tables ``sbjax.studies.convergence.measure`` returns (re-exported there):

* ``percentile_bands``: the q-th percentiles (q = 10, 25, 50, 75, 90) over layers of
  c(s, l) at each step (the authors' main figure);
* ``first_step_reaching``: min{s : c(s, l) >= frac * c(S, l)} (frac = 0.9), and
  ``stable_step``: the first s after which c stays >= frac * c(S, l);
* ``pearson`` / ``spearman`` (Spearman = Pearson of average ranks, ties averaged) of
  those steps with the layer's PER;
* ``cka_matrix`` (steps x layers of one kind / token mode / estimator), ``layer_table``
  (one row per kind, layer, token mode, estimator) and ``correlations``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sbjax.studies.stats import finite_pearson as pearson  # noqa: F401  (re-exported)
from sbjax.studies.stats import spearman  # noqa: F401  (re-exported)

KINDS = ("mlp", "ov")
PERCENTILES = (10, 25, 50, 75, 90)


def percentile_bands(values_SxL, q: Sequence[float] = PERCENTILES) -> np.ndarray:
  """S x len(q): the q-th percentiles over layers (numpy's linear interpolation)."""
  v = np.asarray(values_SxL, float)
  return np.percentile(v, list(q), axis=1).T


def first_step_reaching(steps, values, frac: float = 0.9) -> int | None:
  """min{s : v(s) >= frac * v(S)}, S = the last step (steps ascending); None if never."""
  steps, v = np.asarray(steps), np.asarray(values, float)
  target = frac * v[-1]
  hit = np.nonzero(v >= target)[0]
  return int(steps[hit[0]]) if hit.size else None


def stable_step(steps, values, frac: float = 0.9) -> int | None:
  """The first step from which v stays >= frac * v(S) up to the end; None if v(S) < it."""
  steps, v = np.asarray(steps), np.asarray(values, float)
  ok = v >= frac * v[-1]
  if not ok[-1]:
    return None
  bad = np.nonzero(~ok)[0]
  return int(steps[bad[-1] + 1]) if bad.size else int(steps[0])


def cka_matrix(cka_rows, kind: str, tokens: str, estimator: str):
  """(steps S, S x L array of c(s, l)) for one kind / token mode / estimator."""
  sel = [r for r in cka_rows if r["kind"] == kind and r["tokens"] == tokens
         and r["estimator"] == estimator]
  if not sel:
    raise ValueError(f"no CKA rows for kind={kind} tokens={tokens} estimator={estimator}")
  steps = sorted({int(r["step"]) for r in sel})
  n_layers = 1 + max(int(r["layer"]) for r in sel)
  idx = {s: i for i, s in enumerate(steps)}
  out = np.full((len(steps), n_layers), np.nan)
  for r in sel:
    out[idx[int(r["step"])], int(r["layer"])] = float(r["cka"])
  return np.asarray(steps), out


def layer_table(cka_rows, per_rows, frac: float = 0.9) -> list[dict]:
  """One row per (kind, layer, tokens, estimator): first/stable step reaching frac of the
  final CKA (also as a fraction of the final step) and the layer's PER (weights, and
  gradients if measured) at the final step and averaged over checkpoints."""
  per = {}
  for r in per_rows:
    per.setdefault((r["source"], r["kind"], int(r["layer"])), []).append(
        (int(r["step"]), float(r["per"]), int(r["r"])))
  combos = sorted({(r["kind"], r["tokens"], r["estimator"]) for r in cka_rows},
                  key=lambda c: (KINDS.index(c[0]), c[1] != "last", c[2] != "biased"))
  out = []
  for kind, tokens, est in combos:
    steps, c = cka_matrix(cka_rows, kind, tokens, est)
    final = int(steps[-1])
    for layer in range(c.shape[1]):
      fs, ss = first_step_reaching(steps, c[:, layer], frac), stable_step(steps, c[:, layer], frac)
      row = {"kind": kind, "layer": layer, "tokens": tokens, "estimator": est,
             "final_step": final, "first_step": fs, "stable_step": ss,
             "first_frac": (fs / final) if fs is not None and final else float("nan"),
             "stable_frac": (ss / final) if ss is not None and final else float("nan")}
      for src in ("weights", "gradients"):
        vals = sorted(per.get((src, kind, layer), []))
        if vals:
          row[f"per_{src}_final"] = vals[-1][1]
          row[f"per_{src}_mean"] = float(np.mean([v[1] for v in vals]))
          row[f"per_{src}_r"] = vals[-1][2]
      out.append(row)
  return out


def correlations(rows: list[dict], x: str = "first_step", ys: Sequence[str] = (
    "per_weights_final", "per_weights_mean", "per_gradients_final")) -> list[dict]:
  """Pearson and Spearman of column ``x`` with each PER column over ``rows`` (n = finite pairs)."""
  out = []
  for y in ys:
    xv = np.array([float(r[x]) if r.get(x) is not None else np.nan for r in rows])
    yv = np.array([float(r[y]) if r.get(y) is not None else np.nan for r in rows])
    if np.isnan(yv).all():
      continue
    n = int((np.isfinite(xv) & np.isfinite(yv)).sum())
    out.append({"x": x, "y": y, "n": n, "pearson": pearson(xv, yv), "spearman": spearman(xv, yv)})
  return out
