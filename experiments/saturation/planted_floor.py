r"""The rank floors of the planted arms' languages: floor(d) for every arm width d, kept in
OUT (``planted_floor<lang_tag>.csv`` and its ``.key``) and reused while the language, the
widths and the settings are the same.

Two modes (``Knobs.floor_mode``):

* ``fit``: ``sbjax.studies.floor.floor_curve``, the best of several L-BFGS starts (an upper
  bound on the true minimum below the exact rank, converged to ``floor_gtol``);
* ``svd``: only the value of the fit's ``svd`` start, computed from ONE SVD for all widths,

      diag(√π) M = U S Wᵀ  (M = log P (I − 11ᵀ/V), the row-centred log-probabilities),
      L_d = diag(1/√π) U_d S_d W_dᵀ,   bound(d) = F(L_d) = Σ_c π_c CE(P(·|c), softmax(L_d,c)),

  a certified upper bound, H ≤ floor(d) ≤ bound(d) (L_d has rank d). It costs one SVD of the
  C x V matrix and one objective per width: at V = 4096 that is seconds to a minute, where the
  fit takes hours on a CPU (0.72 s per objective, thousands per start). Its row has
  ``start`` = "svd-bound", ``converged`` False and ``grad_norm`` = the full gradient's norm
  ‖G‖_F at L_d (not stationarity).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..shared import read_rows, write_rows
from sbjax.studies import floor as floor_lib

FLOOR_MODES = ("fit", "svd")


def svd_bounds(lang, ranks) -> list[dict]:
  """The ``svd`` mode's rows (module doc), one per rank, ascending."""
  p = np.asarray(lang.probs, np.float64)
  pi = np.asarray(lang.stationary, np.float64) / np.sum(lang.stationary)
  h = floor_lib.entropy(p, pi)
  logp = np.log(np.clip(p, 1e-300, None))
  w = np.sqrt(np.maximum(pi, 1e-12))
  u, s, vt = np.linalg.svd(w[:, None] * (logp - logp.mean(1, keepdims=True)),
                           full_matrices=False)
  del logp
  rows = []
  for r in sorted({int(r) for r in ranks}):
    k = min(r, s.size)
    f, g = floor_lib.objective((u[:, :k] * s[:k]) @ vt[:k] / w[:, None], p, pi)
    rows.append({"rank": r, "floor": f, "H": h, "floor_gap": f - h,
                 "grad_norm": float(np.linalg.norm(g)), "n_iter": 0, "converged": False,
                 "start": "svd-bound", "n_starts": 1, "spread": 0.0})
  return rows


def floors(lang, p, ranks, out: Path, tag: str = "") -> dict:
  """floor(d) − H for every arm width of a language: {d: row of planted_floor<tag>.csv}
  (tag: ``lang_tag`` of an arm's own language, "" for the preset's); kept in OUT and reused
  while the language, the widths and the settings are the same (module doc)."""
  k = p.knobs
  if k.floor_mode not in FLOOR_MODES:
    raise ValueError(f"floor_mode={k.floor_mode!r}; use one of {', '.join(FLOOR_MODES)}")
  spec = {"lang": lang.info(), "ranks": sorted(ranks), "gtol": k.floor_gtol,
          "max_iter": k.floor_max_iter}
  key = json.dumps(spec if k.floor_mode == "fit" else {**spec, "mode": k.floor_mode},
                   sort_keys=True)
  path, kpath = out / f"planted_floor{tag}.csv", out / f"planted_floor{tag}.key"
  if path.exists() and kpath.exists() and kpath.read_text() == key:
    return {int(r["rank"]): r for r in read_rows(path)}
  if k.floor_mode == "svd":
    rows = {r["rank"]: r for r in svd_bounds(lang, ranks)}
  else:
    res = floor_lib.floor_curve(lang, sorted(ranks), gtol=k.floor_gtol,
                                max_iter=k.floor_max_iter, restarts=2, require_converged=False)
    rows = {r.rank: r.row() for r in res}
  write_rows(path, [rows[d] for d in sorted(rows)])
  kpath.write_text(key)
  return rows
