"""vocab_threshold's measurements: r* and r_0.6 of one sweep, and the log-log fit across V.

With n points, x = log V, y = log r: beta = S_xy / S_xx, se(beta) = sqrt(SSR / (n - 2) / S_xx)
(NaN for n < 3).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from . import tolerance
from .presets import TOL, TOL_CHAR, W_LEVEL
from sbjax.studies.werror import rank_at, threshold_rank, w_error_curve
from sbjax.studies import rank_sweep as rs
from ..shared import load_np, upath


def loglog_fit(v, r) -> dict:
  """Least squares log r = beta log V + c; beta's standard error from the residuals."""
  x, y = np.log(np.asarray(v, np.float64)), np.log(np.asarray(r, np.float64))
  n = len(x)
  if n < 2:
    return {"beta": math.nan, "beta_se": math.nan, "log_c": math.nan, "n": n}
  sxx = float(np.sum((x - x.mean()) ** 2))
  beta = float(np.sum((x - x.mean()) * (y - y.mean())) / sxx)
  c = float(y.mean() - beta * x.mean())
  ssr = float(np.sum((y - (beta * x + c)) ** 2))
  se = math.sqrt(ssr / (n - 2) / sxx) if n > 2 else math.nan
  return {"beta": beta, "beta_se": se, "log_c": c, "n": n}


def grid_interval(ranks, r_star: int) -> tuple[int, int]:
  """(lo, hi]: where the true threshold lies when r* is read on the rank grid ``ranks``:
  hi = r*, lo = the largest grid rank below r* (1 when r* is the smallest)."""
  below = [int(r) for r in ranks if int(r) < int(r_star)]
  return (max(below) if below else 1), int(r_star)


def slope_range(v, lo, hi) -> tuple[float, float]:
  """The range of the least-squares slope beta of log r on log V when each log r_i may be
  anywhere in [log lo_i, log hi_i]. beta = Σ a_i log r_i with a_i = (x_i − x̄)/S_xx, so the
  maximum puts r_i at hi_i where a_i > 0 and at lo_i where a_i < 0, the minimum the reverse.
  The grid width that loglog_fit's standard error ignores (it is 0 when r* sits at one grid
  point at every V)."""
  x = np.log(np.asarray(v, np.float64))
  if len(x) < 2:
    return math.nan, math.nan
  a = (x - x.mean()) / float(np.sum((x - x.mean()) ** 2))
  llo, lhi = np.log(np.asarray(lo, np.float64)), np.log(np.asarray(hi, np.float64))
  return (float(np.sum(np.where(a > 0, a * llo, a * lhi))),
          float(np.sum(np.where(a > 0, a * lhi, a * llo))))


def thresholds(sub: Path, cpt: float | None = None, tol_char: float = TOL_CHAR) -> dict:
  """r* and r_0.6 of one V's sweep directory. With ``cpt`` (characters per token of this V's
  validation text) r* uses the per-character tolerance against the protocol-(a) rank-d head
  when the sweep has one (``tolerance``); without it, the older rule (within TOL of the dense
  head, relative). The dense run counts as rank d. W-error on the centred dense head."""
  sub = upath(sub)
  rows = rs.read_rows(sub)
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])][0]
  lf, d = float(full["eval_loss"]), int(full["rank"])
  proto = "a" if rs.best_rows(rows, "a") else "b"
  best = rs.best_rows(rows, proto)
  ranks = [int(r["rank"]) for r in best]
  losses = [float(r["eval_loss"]) for r in best]
  ref = {"kind": "dense", "loss": lf}
  if proto == "a" and d in ranks:
    ref = {"kind": "a-r=d", "loss": losses[ranks.index(d)]}
  if d not in ranks:
    ranks, losses = ranks + [d], losses + [lf]
  if cpt is None:
    tol_token = TOL * ref["loss"]
    rstar = threshold_rank(ranks, losses, ref["loss"], TOL)
  else:
    tol_token = tolerance.token_tolerance(tol_char, cpt)
    rstar = tolerance.r_star(ranks, losses, ref["loss"], tol_token)
  rstar = d if rstar is None else rstar
  w = load_np(sub / rs.FULL_HEAD, allow_pickle=False)
  _, curve = w_error_curve(tolerance.centred(w))
  _, raw = w_error_curve(w)
  plan = json.loads((sub / "plan.json").read_text())
  return {"V": int(plan["vocab_size"]), "d_model": d, "full_loss": lf, "protocol": proto,
          "reference": ref["kind"], "ref_loss": ref["loss"],
          "chars_per_token": math.nan if cpt is None else cpt, "tol_token": tol_token,
          "r_star": rstar, "loss_at_r_star": losses[ranks.index(rstar)],
          "censored": int(rstar == d), "r_werror06": rank_at(curve, W_LEVEL),
          "r_werror06_raw": rank_at(raw, W_LEVEL), "ranks": " ".join(map(str, ranks)),
          "trunk": plan.get("trunk", "last"), "trunk_step": plan.get("trunk_step", -1),
          "trunk_eval_loss": plan.get("trunk_eval_loss"),
          "head_population": int(bool(plan.get("head_population"))),
          "dtype": plan["base"]["model"].get("dtype", "float32")}
