r"""vocab_threshold's trained r*(V), r_0.6(V) and their fits across V.

Per V, tol_token = TOL_CHAR · c(V), c(V) the characters per validation token: every V is
compared at the same precision per character. r*(V) = the smallest rank whose best-LR
validation loss L(r) <= L_ref + tol_token, L_ref = the protocol-(a) rank-d head when the sweep
has protocol a, else the dense head (r* = d: censored). r_0.6(V) = the smallest k with
W-error(k) <= 0.6 of the centred dense head W − 1 w̄ᵀ (softmax ignores a shift of every row);
``r_werror06_raw``: of W itself.

Fit: log r = beta log V + c by least squares, se = sqrt(SSR / (n − 2) / S_xx) (NaN for n < 3).
Each r* lies in (r−, r*] on its rank grid, so the slopes span [beta_lo, beta_hi], reached at
corners (``slope_range``). ``cell``: the rule's cell of one sweep (``rule.py``), its standard
errors from the per-window losses of the deciding runs against the reference (``window_losses``,
the evaluation's own windows).
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
from scipy.stats import linregress

from sbjax import checkpoint as ckpt
from sbjax.model import Model
from sbjax.studies.head_rank import best_rows
from sbjax.studies.werror import first_within, rank_at, w_error_curve


def chars_per_token(decode, tokens) -> float:
  ids = [int(t) for t in np.asarray(tokens).ravel()]
  return len(decode(ids)) / len(ids)


def thresholds(rows: list, w, cpt: float, tol_char: float, w_level: float) -> tuple:
  """(one V's row of vocab_threshold.csv, its margins; module doc) from its head_rank.csv rows
  and its dense head ``w``."""
  full = next(r for r in rows if r["protocol"] == "full" and int(r["best"]))
  lf, d = float(full["eval_loss"]), int(full["rank"])
  proto = "a" if best_rows(rows, "a") else "b"
  best = best_rows(rows, proto)
  ranks, losses = [int(r["rank"]) for r in best], [float(r["eval_loss"]) for r in best]
  ref = ("a-r=d", losses[ranks.index(d)]) if proto == "a" and d in ranks else ("dense", lf)
  if d not in ranks:
    ranks, losses = ranks + [d], losses + [lf]
  tol = tol_char * cpt
  rstar = first_within(ranks, losses, ref[1] + tol) or d
  loss = dict(zip(ranks, losses))
  below = max((r for r in ranks if r < rstar), default=None)
  w = np.asarray(w, np.float64)
  return {"V": len(w), "d_model": d, "full_loss": lf, "protocol": proto, "reference": ref[0],
          "ref_loss": ref[1], "chars_per_token": cpt, "tol_token": tol, "r_star": rstar,
          "loss_at_r_star": loss[rstar], "censored": int(rstar == d),
          "r_werror06": rank_at(w_error_curve(w - w.mean(0, keepdims=True))[1], w_level),
          "r_werror06_raw": rank_at(w_error_curve(w)[1], w_level),
          "ranks": " ".join(map(str, ranks))}, {
              "V": len(w), "r_star": rstar, "margin_at_r_star": ref[1] + tol - loss[rstar],
              "r_below": below,
              "margin_below": math.nan if below is None else loss[below] - (ref[1] + tol)}


def loglog_fit(v, r) -> dict:
  """Least squares log r = beta log V + c (``scipy.stats.linregress``); beta's standard error
  from the residuals (NaN for n < 3)."""
  n = len(v)
  if n < 2:
    return {"beta": math.nan, "beta_se": math.nan, "log_c": math.nan, "n": n}
  f = linregress(np.log(np.asarray(v, np.float64)), np.log(np.asarray(r, np.float64)))
  return {"beta": float(f.slope), "beta_se": float(f.stderr) if n > 2 else math.nan,
          "log_c": float(f.intercept), "n": n}


def slope_range(v, grids, r_stars) -> list[float]:
  """[beta_lo, beta_hi] when each r_i may lie anywhere in (the grid rank below r*_i, r*_i]
  (1 when r*_i is its grid's smallest): the maximum puts log r_i at its top where
  a_i = (x_i − x̄)/S_xx > 0 and at its bottom where a_i < 0, the minimum the reverse."""
  x = np.log(np.asarray(v, np.float64))
  if len(x) < 2:
    return [math.nan, math.nan]
  lo = np.log([max([int(g) for g in grid if int(g) < r], default=1)
               for grid, r in zip(grids, r_stars)])
  hi, a = np.log(np.asarray(r_stars, np.float64)), (x - x.mean()) / np.sum((x - x.mean()) ** 2)
  return [float(np.sum(np.where(a > 0, a * lo, a * hi))),
          float(np.sum(np.where(a > 0, a * hi, a * lo)))]


def head_lrs(runs: list, table: list) -> list[dict]:
  """Per (V, head lr) of protocol (a), more than one head lr: the losses by rank, r*_lr (the
  table's rule against the same lr's rank-d head) and the ranks where that lr wins."""
  out = []
  for t in table:
    sel = [r for r in runs if int(r["V"]) == int(t["V"]) and r["protocol"] == "a"
           and r["head"] == "lowrank"]
    lrs = sorted({float(r["lr"]) for r in sel})
    for lr in lrs if len(lrs) > 1 else ():
      mine = {int(r["rank"]): float(r["eval_loss"]) for r in sel if float(r["lr"]) == lr}
      ref = mine.get(int(t["d_model"]))
      out.append({"V": int(t["V"]), "lr": lr, **{f"r={k}": v for k, v in sorted(mine.items())},
                  "r_star_lr": None if ref is None else first_within(
                      list(mine), list(mine.values()), ref + float(t["tol_token"])),
                  "wins": " ".join(str(k) for k in sorted(mine) if all(
                      mine[k] <= float(x["eval_loss"]) for x in sel if int(x["rank"]) == k))})
  return out


def window_losses(workdir, ds, eval_batches: int) -> list[float]:
  """The validation loss of each evaluation window (``ds.eval_batches``' windows, in stream
  order) of the newest checkpoint of ``workdir``: their mean is its eval_loss."""
  cfg, params, _ = ckpt.load_params(workdir)
  f = _window_loss_fn(cfg.model)
  return [float(x) for b in ds.eval_batches(eval_batches) for x in np.asarray(f(params, b))]


@functools.lru_cache(maxsize=8)
def _window_loss_fn(mc):
  """jit: (params, windows [n, T+1]) -> each window's loss, one program per model config."""
  model = Model(mc)
  return jax.jit(lambda p, b: jax.vmap(lambda w: model.loss(p, w[None])[0])(b))


def excesses(rows: list, row: dict) -> dict:
  """rank -> its loss in ``thresholds`` (best LR) − the reference's loss."""
  best = best_rows(rows, row["protocol"])
  out = {int(r["rank"]): float(r["eval_loss"]) - row["ref_loss"] for r in best}
  out.setdefault(row["d_model"], row["full_loss"] - row["ref_loss"])
  return out


def run_of(rows: list, row: dict, rank: int | None) -> str:
  """The run behind a rank's loss in ``thresholds`` (None: the reference run)."""
  full = next(r["run"] for r in rows if r["protocol"] == "full" and int(r["best"]))
  if rank is None:
    return run_of(rows, row, row["d_model"]) if row["reference"] == "a-r=d" else full
  return next((r["run"] for r in best_rows(rows, row["protocol"]) if int(r["rank"]) == rank),
              full)


def cell(rows: list, row: dict, margins: dict, se_of) -> dict:
  """The rule's cell of one sweep: r*, the rank below, their excesses, margins and standard
  errors (``se_of(run)``: of run − the reference run), the excess at every rank."""
  rs, below, ex = row["r_star"], margins["r_below"], excesses(rows, row)
  return {"V": row["V"], "r_below": below or 0, "r_star": rs, "censored": row["censored"],
          "tol_token": row["tol_token"], "excess_below": ex.get(below, math.nan),
          "margin_below": margins["margin_below"],
          "se_below": se_of(run_of(rows, row, below)) if below else math.nan,
          "excess_at_r_star": ex[rs], "margin_at_r_star": margins["margin_at_r_star"],
          "se_at_r_star": se_of(run_of(rows, row, rs)),
          **{f"excess_r{k}": x for k, x in sorted(ex.items())}}


def start_movement(cells: list) -> tuple:
  """(moved, where): the largest |excess(r) − the seed-0 excess(r)| over the V with more than
  one seed and the ranks deciding any of their cells (r* and the rank below); NaN, '' when no
  V has two seeds."""
  best, where = math.nan, ""
  for v in sorted({c["V"] for c in cells}):
    mine = [c for c in cells if c["V"] == v]
    ref = next((c for c in mine if c["seed"] == 0), None)
    ranks = {c[k] for c in mine for k in ("r_star", "r_below") if c[k]}
    for c in (c for c in mine if ref is not None and c is not ref):
      for r in sorted(ranks):
        d = abs(c[f"excess_r{r}"] - ref[f"excess_r{r}"])
        if math.isnan(best) or d > best:
          best, where = d, f"V = {v}, r = {r}, seed {c['seed']} vs 0"
  return best, where
