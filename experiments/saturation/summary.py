"""From the measured checkpoints of every width to saturation_runs.csv and saturation_fit.csv:
per width the losses, two late-rise tests (naive: final − best > rise_tol; paired: ``rise.py``
on the window losses, and its statistic of the train loss binned between checkpoints), the
head's KL and anisotropy at the best and final checkpoint; the law (below) fitted on
the widths >= fit_min_width with N without the head (fits ``final``, ``best``) and with it
(``final_with_head``), each width's gap to it and its paired-bootstrap CI; each smaller width's
gap with each fitted width left out (``loo_rows``) and the verdict on the small widths' gaps
(``scaling_verdict``).

The scaling law L(N) = A / N^alpha + E (Kaplan et al. 2020; Godey et al. 2024, Sec. 3) is fitted
by least squares with A, E >= 0, alpha in [alpha_min, alpha_max]: for each alpha on a log grid
the best (A, E) >= 0 in closed form (variable projection), the best grid alpha refined by
``scipy.optimize.least_squares`` on (A / N_ref^alpha, alpha, E), N_ref the geometric mean of N.
``gap_pct(L, N)`` = 100 (L − L_fit(N)) / L_fit(N): how far above (> 0) the law a model is."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
from scipy.optimize import least_squares

from sbjax import optim
from sbjax.heads import head_param_count
from sbjax.model import Model, non_embedding_params

from . import rise as rise_lib
from .planted_measure import window_losses

@dataclasses.dataclass(frozen=True)
class ScalingFit:
  A: float
  alpha: float
  E: float
  n_points: int
  rmse: float  # root mean squared residual (nats) of the fitted points

  def predict(self, n) -> np.ndarray:
    n = np.asarray(n, np.float64)
    return self.A * np.power(n, -self.alpha) + self.E

  def gap_pct(self, loss, n) -> np.ndarray:
    """100 (L_obs - L_fit(N)) / L_fit(N)."""
    pred = self.predict(n)
    return 100.0 * (np.asarray(loss, np.float64) - pred) / pred


def _best_ae(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
  """(A, E, sse) of min ||A x + E − y||² over A, E >= 0: the interior solution when it is
  feasible, else the better boundary (E = 0 or A = 0)."""
  xm, ym, cands = x.mean(), y.mean(), []
  vx = float(((x - xm) ** 2).sum())
  if vx > 0:
    a = float(((x - xm) * (y - ym)).sum() / vx)
    if a >= 0 and float(ym - a * xm) >= 0:
      cands.append((a, float(ym - a * xm)))
  if float(x @ x) > 0:
    cands.append((max(0.0, float(x @ y) / float(x @ x)), 0.0))
  cands.append((0.0, max(0.0, float(ym))))
  return min(((a, e, float(((a * x + e - y) ** 2).sum())) for a, e in cands), key=lambda c: c[2])


def fit_power_law(n, loss, *, alpha_min: float = 1e-3, alpha_max: float = 3.0,
                  grid: int = 400) -> ScalingFit:
  """Fit L = A / N^alpha + E to points (N_i, L_i) (module doc). Needs >= 3 points."""
  n, y = np.asarray(n, np.float64).reshape(-1), np.asarray(loss, np.float64).reshape(-1)
  if n.size < 3:
    raise ValueError(f"the fit L = A/N^alpha + E has 3 parameters and needs >= 3 points; got "
                     f"{n.size}. Use more model sizes in the fit")
  n_ref = float(np.exp(np.mean(np.log(n))))
  z = n / n_ref
  a0, e0, sse0, al0 = min(((*_best_ae(z ** -al, y), float(al))
                           for al in np.geomspace(alpha_min, alpha_max, grid)), key=lambda c: c[2])

  def resid(p):
    return p[0] * z ** -p[1] + p[2] - y

  ymax = float(np.max(np.abs(y))) + 1.0
  res = least_squares(resid, x0=[max(a0, 1e-12), al0, max(e0, 0.0)],
                      bounds=([0.0, alpha_min, 0.0], [np.inf, alpha_max, 10 * ymax]),
                      xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=10_000)
  if float((res.fun ** 2).sum()) <= sse0:
    a0, al0, e0 = (float(v) for v in res.x)
  pred = a0 * z ** -al0 + e0
  rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
  return ScalingFit(A=float(a0 * n_ref ** al0), alpha=float(al0), E=float(e0),
                    n_points=int(n.size), rmse=rmse)


def bootstrap_gap(n, losses_PxW, in_fit, *, n_boot: int = 300, ci: float = 0.95, seed: int = 0,
                  grid: int = 100) -> dict:
  """{lo, hi}: the percentile CI of every point's gap_pct to the law fitted on the points
  ``in_fit``, by a paired bootstrap over validation windows: ``losses_PxW[i, w]`` is model i's
  loss on window w (the same W windows for every model); each draw resamples the windows with
  replacement (one draw for all models), refits on the resampled means and recomputes every gap."""
  n, L, infit = (np.asarray(n, np.float64), np.asarray(losses_PxW, np.float64),
                 np.asarray(in_fit, bool))
  w = L.shape[1]
  counts = np.random.default_rng(seed).multinomial(w, np.full(w, 1.0 / w), size=n_boot)
  g = np.array([fit_power_law(n[infit], m[infit], grid=grid).gap_pct(m, n)
                for m in (L @ c / w for c in counts)])
  lo, hi = np.quantile(g, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
  return {"lo": lo, "hi": hi}


def leave_one_out(n, loss, in_fit) -> dict[int, np.ndarray]:
  """{i: every point's gap_pct to the law fitted on the points ``in_fit`` without point i}, for
  each fitted i ({} with fewer than 4 fitted points: a fit needs 3)."""
  n, y, infit = (np.asarray(n, np.float64), np.asarray(loss, np.float64),
                 np.asarray(in_fit, bool))
  fitted = np.nonzero(infit)[0]
  if fitted.size < 4:
    return {}
  keep = {int(i): infit & (np.arange(infit.size) != i) for i in fitted}
  return {i: fit_power_law(n[k], y[k]).gap_pct(y, n) for i, k in keep.items()}


FITS = ("final", "best")
GAP_FITS = (("final", "n_nonembedding"), ("final_with_head", "n_with_head"))


def smooth(x, k: int) -> np.ndarray:
  """Moving average over k values ('valid' part: len(x) − k + 1 values)."""
  x = np.asarray(x, np.float64)
  if x.size == 0 or k <= 1:
    return x
  k = min(k, x.size)
  return np.convolve(x, np.ones(k) / k, mode="valid")


def width_row(cfg, ck: list[dict], train: list[dict], k) -> dict:
  """One width's row from its saved Config, checkpoint rows and train-loss records."""
  rows = [r for r in ck if math.isfinite(r["eval_loss"])]
  if not rows:
    raise ValueError(f"{cfg.name}: no finite eval_loss at any checkpoint; the run diverged")
  loss = np.array([r["eval_loss"] for r in rows], np.float64)  # in step order
  ib, i_f = int(np.argmin(loss)), len(rows) - 1  # the naive test: final − best > rise_tol
  rise = float(loss[i_f] - loss[ib])
  trs = smooth([r["loss"] for r in train], k.smooth)
  train_rise = float(trs[-1] - trs.min()) if trs.size else math.nan
  model, n = Model(cfg.model), non_embedding_params(cfg.model)
  return {
      "width": cfg.model.d_model, "n_layers": cfg.model.n_layers, "n_nonembedding": n,
      "n_with_head": n + head_param_count(cfg.model),
      "n_params": model.param_count(model.abstract_params()),
      "vocab_size": cfg.model.vocab_size, "steps": int(rows[i_f]["step"]),
      "gamma_total": optim.gamma_total(cfg.train),
      "final_eval_loss": float(loss[i_f]), "best_eval_loss": float(loss[ib]),
      "best_step": int(rows[ib]["step"]), "rise": rise, "late_rise": int(rise > k.rise_tol),
      "train_rise": train_rise, "train_late_rise": int(train_rise > k.rise_tol),
      "kl_best": float(rows[ib].get("head_kl_uniform", math.nan)),
      "kl_final": float(rows[i_f].get("head_kl_uniform", math.nan)),
      "anisotropy_best": float(rows[ib].get("anisotropy_last", math.nan)),
      "anisotropy_final": float(rows[i_f].get("anisotropy_last", math.nan)),
      **paired_rise(ck, train, cfg.train.steps, k)}


def paired_rise(ck: list[dict], train: list[dict], total: int, k) -> dict:
  """The paired rise of the window losses (NaN without a checkpoint after rise_after)."""
  out = {"rise_stat": math.nan, "rise_ci_lo": math.nan, "rise_ci_hi": math.nan,
         "rise_verdict": "n/a", "rise_onset_step": None, "train_rise_stat": math.nan}
  steps = np.array([r["step"] for r in ck])
  if steps[-1] < k.rise_after * total:
    return out
  r = rise_lib.rise_test(steps, window_losses(ck), total, threshold=k.rise_threshold,
                         after=k.rise_after, n_boot=k.n_boot)
  out.update(rise_stat=r["rise"], rise_ci_lo=r["ci_lo"], rise_ci_hi=r["ci_hi"],
             rise_verdict=r["verdict"], rise_onset_step=r["onset_step"])
  b = rise_lib.binned_means([x["step"] + 1 for x in train], [x["loss"] for x in train], steps)
  ok = np.isfinite(b)
  if ok.any() and steps[ok][-1] >= k.rise_after * total:
    out["train_rise_stat"] = float(rise_lib.rise_statistic(steps[ok], b[ok], total, k.rise_after))
  return out


def _fit(n, y, what: str) -> ScalingFit:
  try:
    return fit_power_law(n, y)
  except ValueError as e:
    logging.warning("saturation: no %s fit: %s", what, e)
    return ScalingFit(math.nan, math.nan, math.nan, len(n), math.nan)


def fit_rows(rows: list[dict], fit_min_width: int) -> tuple[list[dict], list[dict]]:
  """The three fits (module doc; NaN with < 3 widths in the fit); adds ``in_fit``,
  ``pred_<fit>`` and ``gap_<fit>_pct`` = 100 (L − L_fit(N)) / L_fit(N) to every row; returns
  (rows, one row per fit)."""
  infit = np.array([r["width"] >= fit_min_width for r in rows])
  fits = {}
  for key, col, loss in (("final", "n_nonembedding", "final"), ("best", "n_nonembedding", "best"),
                         ("final_with_head", "n_with_head", "final")):
    n = np.array([r[col] for r in rows], np.float64)
    fits[key] = _fit(n[infit], np.array([r[f"{loss}_eval_loss"] for r in rows])[infit], key)
  for r, f in zip(rows, infit):
    r["in_fit"] = int(f)
    for key in FITS:
      r[f"pred_{key}"] = float(fits[key].predict(r["n_nonembedding"]))
      r[f"gap_{key}_pct"] = float(fits[key].gap_pct(r[f"{key}_eval_loss"], r["n_nonembedding"]))
  for r in rows:
    r["gap_final_with_head_pct"] = float(fits["final_with_head"].gap_pct(r["final_eval_loss"],
                                                                         r["n_with_head"]))
  widths = "+".join(str(r["width"]) for r in rows if r["in_fit"])
  return rows, [{"step": i, "fit_on": key, **dataclasses.asdict(f), "widths": widths}
                for i, (key, f) in enumerate(fits.items())]


def gap_cis(rows: list[dict], finals: list[np.ndarray], n_boot: int) -> None:
  """``gap_<fit>_ci_lo``/``hi`` for both N counts: the paired-bootstrap CI of each width's
  final gap over its final window losses ``finals`` (``bootstrap_gap``)."""
  for r in rows:
    for fit, _ in GAP_FITS:
      r[f"gap_{fit}_ci_lo"] = r[f"gap_{fit}_ci_hi"] = math.nan
  infit = np.array([bool(r["in_fit"]) for r in rows])
  if infit.sum() < 3:
    return
  for fit, col in GAP_FITS:
    g = bootstrap_gap([r[col] for r in rows], np.stack(finals), infit, n_boot=n_boot)
    for r, lo, hi in zip(rows, g["lo"], g["hi"]):
      r[f"gap_{fit}_ci_lo"], r[f"gap_{fit}_ci_hi"] = float(lo), float(hi)


def loo_rows(rows: list[dict]) -> list[dict]:
  """For both N counts, each small width's gap under the law refitted with each fitted width
  left out (``leave_one_out``): one row per (fit, width, left-out width); adds to the
  small widths' rows ``gap_<fit>_loo_lo``/``hi`` (the range over those fits and the full one)
  and ``gap_<fit>_loo_lo_without``/``hi_without`` (the width left out at each end; 0: none)."""
  infit = [bool(r["in_fit"]) for r in rows]
  out = []
  for fit, col in GAP_FITS:
    loo = leave_one_out([r[col] for r in rows], [r["final_eval_loss"] for r in rows],
                                infit)
    for j, r in enumerate(rows):
      if infit[j]:
        continue
      gaps = [(0, r[f"gap_{fit}_pct"])] + [(rows[i]["width"], float(g[j])) for i, g in
                                             loo.items()]
      out += [{"fit_on": fit, "width": r["width"], "left_out": w, "gap_pct": g}
              for w, g in gaps[1:]]
      lo, hi = (min(gaps, key=lambda x: x[1]), max(gaps, key=lambda x: x[1])) if loo else (
          (0, math.nan), (0, math.nan))
      r.update({f"gap_{fit}_loo_lo": lo[1], f"gap_{fit}_loo_hi": hi[1],
                f"gap_{fit}_loo_lo_without": lo[0], f"gap_{fit}_loo_hi_without": hi[0]})
  return out


def _count_side(small: list[dict], fit: str) -> str:
  """"above" ("below") when every small width's CI and leave-one-out range lie above (below)
  0, else "undecided" (NaN bounds included)."""
  b = [(r[f"gap_{fit}_ci_lo"], r[f"gap_{fit}_ci_hi"], r.get(f"gap_{fit}_loo_lo", math.nan),
        r.get(f"gap_{fit}_loo_hi", math.nan)) for r in small]
  if small and all(min(x[0], x[2]) > 0 for x in b):
    return "above"
  return "below" if small and all(max(x[1], x[3]) < 0 for x in b) else "undecided"


def scaling_verdict(rows: list[dict]) -> dict:
  """The claim "the small widths lie above the law of the larger ones" (Godey Fig. 1b):
  supported when, under both N counts, every width below the fit has its gap CI and its
  leave-one-out range above 0; refuted when both lie below 0 under both counts; else
  undecided (a CI or a leave-one-out range crosses 0, or the counts disagree)."""
  small = [r for r in rows if not r["in_fit"]]
  sides = {fit: _count_side(small, fit) for fit, _ in GAP_FITS}
  verdict = ("supported" if set(sides.values()) == {"above"} else
             "refuted" if set(sides.values()) == {"below"} else "undecided")
  cross = sorted({int(r["width"]) for r in small for fit, _ in GAP_FITS
                  if not (r.get(f"gap_{fit}_loo_lo", math.nan) > 0
                          or r.get(f"gap_{fit}_loo_hi", math.nan) < 0)})
  return {"verdict": verdict, "sides": sides, "small_widths": [int(r["width"]) for r in small],
          "loo_crosses_0": cross}
