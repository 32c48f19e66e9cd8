"""What the planted arms measure: each checkpoint (``measurer``), each arm (``arm_summary``), and
the rank floors of a language (``floors``). Per checkpoint, on the fixed validation windows x_w:
``loss_w<w>``, the Rao-Blackwellised expected loss of window w, mean over its positions t of
Σ_v P(v | x_t) (−log q_t(v)) (P the language's exact next-token law; ``expected_loss``: their
mean; ``eval_loss``: the sampled loss); the last-layer ``anisotropy_last``; the head spectra of
W and of (I − 11ᵀ/V) W (``kl_*``, ``erank_*``, ``w_error_*_<r>``); ``ln_f_bias_norm``;
``gamma`` = λ Σ_{t<s} η_t; the head's mean row norm over the V // 128 rarest, the as many most
frequent, and all tokens."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import heads as heads_lib
from sbjax import optim
from sbjax import metrics as M
from sbjax.data.planted_tail import token_marginal
from sbjax.model import Model
from sbjax.studies import floor as floor_lib

from . import rise as rise_lib

W_ERROR_DIMS = (2, 4, 8)  # W-error(r) columns (r >= d gives 0: the head has rank <= d)
ROW_NORMS = ("rare_row_norm", "frequent_row_norm", "row_norm_mean")
WINDOW = "loss_w"


def window_losses(rows: list[dict]) -> np.ndarray:
  """L[K, W] from the rows' ``loss_w<w>`` columns (the bootstrap units)."""
  cols = sorted((k for k in rows[0] if k.startswith(WINDOW)), key=lambda k: int(k[len(WINDOW):]))
  return np.array([[r[c] for c in cols] for r in rows], np.float64)


@functools.lru_cache(maxsize=8)
def _checkpoint_fn(mc):
  model = Model(mc)

  def measure_checkpoint(params, x, y, c, probs, rare, frequent):
    scores, ex = model.forward(params, x, ("h",))
    logq = jax.nn.log_softmax(scores.astype(jnp.float32), axis=-1)
    rb = -jnp.sum(probs[c] * logq, axis=-1)  # (W, T)
    nll = -jnp.take_along_axis(logq, y[..., None], axis=-1)[..., 0]
    h = ex["h"].reshape(-1, ex["h"].shape[-1])
    w = heads_lib.head_matrix(params, mc)
    sp = M.head_spectra(w, d=jnp.asarray(W_ERROR_DIMS), method="svd")
    norms = jnp.linalg.norm(w.astype(jnp.float32), axis=-1)
    return {"w_error_raw": sp.raw.w_error, "w_error_centred": sp.centred.w_error,
            "rb_W": rb.mean(-1), "nll_W": nll.mean(-1), "anisotropy_last": M.anisotropy(h),
            "kl_raw": sp.raw.kl_to_uniform, "erank_raw": sp.raw.effective_rank,
            "kl_centred": sp.centred.kl_to_uniform,
            "erank_centred": sp.centred.effective_rank,
            "rare_row_norm": norms[rare].mean(), "frequent_row_norm": norms[frequent].mean(),
            "row_norm_mean": norms.mean()}

  return jax.jit(measure_checkpoint)


def measurer(cfg, windows_WxT1: np.ndarray, lang):
  """(step, params) -> the checkpoint's row (module doc); a context-1 language (c_t = x_t)."""
  if lang.context != 1:
    raise ValueError(f"the planted arms measure a context-1 language, got context={lang.context}")
  x, y = windows_WxT1[:, :-1], windows_WxT1[:, 1:]
  fn = _checkpoint_fn(cfg.model)
  probs = jnp.asarray(lang.probs, jnp.float32)
  table = optim.gamma_schedule(cfg.train)
  order, n = np.argsort(token_marginal(lang), kind="stable"), max(1, lang.vocab // 128)
  rare, frequent = order[:n].astype(np.int32), order[::-1][:n].astype(np.int32)

  def one(s: int, params) -> dict:
    m = jax.device_get(fn(params, x, y, x, probs, rare, frequent))
    loss = np.asarray(m["rb_W"], np.float64)
    bias = params.get("ln_f", {}).get("bias")
    return {"gamma": float(optim.gamma_at(cfg.train, s, table)),
            "expected_loss": float(loss.mean()), "eval_loss": float(np.mean(m["nll_W"])),
            **{k: float(m[k]) for k in ("anisotropy_last", "kl_raw", "kl_centred",
                                        "erank_raw", "erank_centred", *ROW_NORMS)},
            **{f"w_error_{kind}_{r}": float(m[f"w_error_{kind}"][j])
               for kind in ("raw", "centred") for j, r in enumerate(W_ERROR_DIMS)},
            "ln_f_bias_norm": float(np.linalg.norm(np.asarray(bias))) if bias is not None
            else float("nan"),
            **{f"{WINDOW}{w}": float(v) for w, v in enumerate(loss)}}

  return one


def null_and_peak(rows: list[dict], steps: np.ndarray, total: int, k) -> dict:
  """The rise against its null level (``rise.null_level`` with ``k.rule``'s constants) and the
  head at the rise's peak: its start (the running minimum the peak is measured from), the
  centred KL and anisotropy at the peak and the centred KL's jump from the start."""
  r = k.rule
  mean = window_losses(rows).mean(axis=1)
  null = rise_lib.null_level(steps, mean, total, after=k.after, q=r.null_quantile,
                             n_perm=r.n_perm, block=r.block)
  exc = rise_lib.excess_over_running_min(mean)
  mask = steps >= k.after * total
  peak = int(np.nonzero(mask)[0][np.argmax(exc[mask])])
  start = int(np.argmin(mean[:peak + 1]))
  kl = [rows[i]["kl_centred"] for i in (start, peak)]
  return {"rise_null": null["level"], "rise_p": null["p"],
          "rise_above_null": int(float(exc[peak]) > null["level"]),
          "rise_start_step": int(steps[start]), "kl_centred_peak": kl[1],
          "anisotropy_peak": rows[peak]["anisotropy_last"], "kl_centred_jump": kl[1] - kl[0]}


def arm_summary(rows: list[dict], train_recs: list[dict], cfg, k, floor: float,
                entropy: float) -> dict:
  """One arm's row of planted_arms.csv: the rise with its CI and verdict (rise.py), its null
  level and the head at its peak, the train loss's rise, the final values and the floor gap."""
  steps, total = np.array([r["step"] for r in rows]), cfg.train.steps
  rt = rise_lib.rise_test(steps, window_losses(rows), total, threshold=k.threshold,
                          after=k.after, n_boot=k.n_boot)
  tr = rise_lib.binned_means([r["step"] + 1 for r in train_recs],
                             [r["loss"] for r in train_recs], steps)  # a record of step i: i + 1
  ok = np.isfinite(tr)
  train_rise = float(rise_lib.rise_statistic(steps[ok], tr[ok], total, k.after)) if ok.any() \
      else float("nan")
  out = {"d": cfg.model.d_model, "weight_decay": cfg.train.weight_decay,
         "dtype": cfg.model.dtype, "steps": total, "gamma_total": optim.gamma_total(cfg.train),
         "rise": rt["rise"], "rise_ci_lo": rt["ci_lo"], "rise_ci_hi": rt["ci_hi"],
         "rise_verdict": rt["verdict"], "rise_onset_step": rt["onset_step"],
         "rise_peak_step": rt["peak_step"], **null_and_peak(rows, steps, total, k),
         "train_rise": train_rise,
         "train_rise_moves": int(train_rise >= k.threshold)}
  i = int(np.nonzero(steps == rt["onset_step"])[0][0]) if rt["onset_step"] is not None else None
  out["gamma_at_rise"] = rows[i]["gamma"] if i is not None else float("nan")
  final = rows[-1]
  out.update(final_expected_loss=final["expected_loss"], floor=floor, H=entropy,
             floor_gap=floor - entropy, gap_to_floor=final["expected_loss"] - floor,
             final_kl_raw=final["kl_raw"], final_kl_centred=final["kl_centred"],
             final_anisotropy=final["anisotropy_last"],
             final_ln_f_bias_norm=final["ln_f_bias_norm"],
             **{f"final_{c}": final[c] for c in ROW_NORMS})
  return out


def svd_bounds(lang, ranks) -> list[dict]:
  """floor(d) ≤ F(L_d), L_d = diag(1/√π) U_d S_d W_dᵀ from ONE SVD diag(√π) M = U S Wᵀ of the
  π-weighted row-centred log-probabilities M: a certified upper bound, one row per rank."""
  p = np.asarray(lang.probs, np.float64)
  pi = np.asarray(lang.stationary, np.float64) / np.sum(lang.stationary)
  h = floor_lib.entropy(p, pi)
  logp = np.log(np.clip(p, 1e-300, None))
  w = np.sqrt(np.maximum(pi, 1e-12))
  u, s, vt = np.linalg.svd(w[:, None] * (logp - logp.mean(1, keepdims=True)),
                           full_matrices=False)
  rows = []
  for r in sorted({int(r) for r in ranks}):
    k = min(r, s.size)
    f, g = floor_lib.objective((u[:, :k] * s[:k]) @ vt[:k] / w[:, None], p, pi)
    rows.append({"rank": r, "floor": f, "H": h, "floor_gap": f - h,
                 "grad_norm": float(np.linalg.norm(g)), "n_iter": 0, "converged": False,
                 "start": "svd-bound", "n_starts": 1, "spread": 0.0})
  return rows


def floors(lang, ranks, k) -> list[dict]:
  """floor(d) of ``lang`` for every rank: ``floor_mode`` "fit" (best of several L-BFGS
  starts, ``sbjax.studies.floor.floor_curve``) or "svd" (``svd_bounds``)."""
  if k.floor_mode == "svd":
    return svd_bounds(lang, ranks)
  return [r.row() for r in floor_lib.floor_curve(lang, sorted(ranks), gtol=k.floor_gtol,
                                                 max_iter=k.floor_max_iter, restarts=2,
                                                 require_converged=False)]
