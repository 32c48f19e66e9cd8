"""One CSV row per checkpoint from a computed group (the columns of ``outputs.COLUMN_DOCS``,
in that order; the centred head spectra follow the raw ones)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from sbjax import metrics as M
from sbjax import optim
from sbjax.analysis.samples import Samples
from sbjax.analysis.settings import Settings
from sbjax.paths import upath

log = logging.getLogger("sbjax")


@dataclasses.dataclass
class GroupResult:
  """What one vmapped group gave (leading axis K = checkpoints; None where not computed):
  ``acc`` (``forward.eval_pass``), ``htr`` (train features), ``wm`` (weight metrics),
  ``cka`` ({"mlp", "ov": K x L}), ``an`` (K x L) and ``an_last`` (K,) anisotropy."""

  acc: dict | None = None
  htr: np.ndarray | None = None
  wm: dict | None = None
  cka: dict | None = None
  an: np.ndarray | None = None
  an_last: np.ndarray | None = None


def _f(x) -> float:
  return float(np.asarray(x))


def _spectrum(wm: dict, k: int, wdims) -> tuple[dict, list]:
  row = dict(head_kl_uniform=_f(wm["kl"][k]), head_erank=_f(wm["erank"][k]),
             head_per=_f(wm["per"][k]), head_stable_rank=_f(wm["stable"][k]),
             head_sigma_max=_f(wm["smax"][k]))
  for j, dd in enumerate(wdims):
    row[f"head_w_error_{int(dd)}"] = _f(wm["w_error"][k][j])
  if "kl_c" in wm:  # the vocabulary-centred head (I - 11^T/V) W
    row.update(head_kl_uniform_centred=_f(wm["kl_c"][k]), head_erank_centred=_f(wm["erank_c"][k]))
    for j, dd in enumerate(wdims):
      row[f"head_w_error_centred_{int(dd)}"] = _f(wm["w_error_c"][k][j])
  return row, [float(x) for x in np.asarray(wm["top"][k])]


def _collapse(g: GroupResult, k: int, sm: Samples, settings: Settings) -> dict:
  """The scalar collapse_metrics keys (raises ValueError where they are undefined)."""
  w = np.asarray(g.wm["w"][k], np.float32)
  d = w.shape[1]
  cm = M.collapse_metrics(
      g.htr[k].reshape(-1, d), sm.tr_y, w, g.acc["h"][k].reshape(-1, d), sm.val_y,
      options=M.CollapseOptions(min_count=settings.min_count, cdnv_exponent=settings.cdnv_exponent,
                                weighted_mean=settings.weighted_mean, nc4_search=settings.nc4_search))
  return {kk: (float(v) if not isinstance(v, int) else v) for kk, v in cm.to_dict().items()
          if np.ndim(v) == 0}


def _per_layer(prefix: str, values, k: int, n_layers: int) -> dict:
  return {f"{prefix}_{i}": float(values[k][i]) for i in range(n_layers)}


def step_row(step: int, k: int, g: GroupResult, sm: Samples, settings: Settings, n_layers: int,
             wdims) -> tuple[dict, list | None, bool]:
  """(row, normalized top spectrum or None, collapse failed?) of checkpoint k of a group."""
  row: dict = {"step": int(step)}
  top, failed = None, False
  if settings.has("loss"):
    n_tok = sm.n_eval * sm.t_len
    row["eval_loss"] = float(g.acc["nll"][k] / n_tok)
    row["eval_acc"] = float(g.acc["correct"][k] / n_tok)
  if g.an is not None:
    row.update(_per_layer("anisotropy_layer", g.an, k, n_layers))
    row["anisotropy_last"] = float(g.an_last[k])
  if settings.has("spectrum"):
    cols, top = _spectrum(g.wm, k, wdims)
    row.update(cols)
  if settings.has("collapse"):
    try:
      row.update(_collapse(g, k, sm, settings))
    except ValueError as e:  # e.g. non-finite features of a diverged checkpoint
      failed = True
      log.warning("collapse metrics undefined at step %d: %s", step, e)
  if g.cka is not None:
    row.update(_per_layer("cka_to_final_mlp", g.cka["mlp"], k, n_layers))
    row.update(_per_layer("cka_to_final_attn", g.cka["ov"], k, n_layers))
  if settings.has("per"):
    row.update({f"per_mlp_{i}": _f(g.wm["per_mlp"][k][i]) for i in range(n_layers)})
    row.update({f"per_ov_{i}": _f(g.wm["per_ov"][k][i]) for i in range(n_layers)})
  return row, top, failed


def with_gamma(rows: list[dict], cfg, workdir) -> list[dict]:
  """``rows`` with ``gamma`` = Γ(step) = λ Σ_{t<step} η_t (``sbjax.optim.gamma_at`` of the
  run's train config) after ``step``, for a run sbjax trained (``WORKDIR/metrics.jsonl``
  exists); an imported series has no schedule of ours, so its rows are returned as they are."""
  if not (upath(workdir) / "metrics.jsonl").exists():
    return rows
  g = optim.gamma_at(cfg.train, [int(r["step"]) for r in rows]) if rows else []
  return [{"step": r["step"], "gamma": float(gk), **r} for r, gk in zip(rows, g)]
