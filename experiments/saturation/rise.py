"""The late loss rise (Godey et al. 2024) as a statistic with a paired-bootstrap CI.

``L[k, w]``: the loss of checkpoint k (steps s_k ascending, of a run of ``total`` steps) on the
fixed validation window w. With ℓ_k = mean_w L[k, w] and its running minimum m_k,
R = max_{k : s_k ≥ after · total} (ℓ_k − m_k): how far the loss climbs above its best after
30% of training. ``rise_test`` resamples the windows with replacement (one draw for every
checkpoint: paired) for the percentile CI of R; its verdict against ``threshold``: "yes" when
the CI's lower end is ≥ threshold, "no" when its upper end is below it, else "inconclusive";
``onset_step``: the first checkpoint after ``after · total`` with ℓ_k − m_k ≥ threshold."""

from __future__ import annotations

import numpy as np

VERDICTS = ("yes", "no", "inconclusive")


def excess_over_running_min(values_K) -> np.ndarray:
  """ℓ_k − min_{j ≤ k} ℓ_j (≥ 0), along the last axis."""
  v = np.asarray(values_K, np.float64)
  return v - np.minimum.accumulate(v, axis=-1)


def _after_mask(steps, total: int, after: float) -> np.ndarray:
  steps = np.asarray(steps)
  if steps.ndim != 1 or np.any(np.diff(steps) <= 0):
    raise ValueError(f"steps must be a strictly increasing 1-D sequence, got {steps.tolist()}")
  mask = steps >= after * total
  if not mask.any():
    raise ValueError(f"no checkpoint at or after {after:.0%} of training ({after * total:g} of "
                     f"{total} steps; last checkpoint {int(steps[-1])}); save later checkpoints")
  return mask


def rise_statistic(steps, values, total: int, after: float = 0.3) -> float:
  """R = max over checkpoints s_k ≥ after · total of ℓ_k − min_{j≤k} ℓ_j (values: (..., K))."""
  mask = _after_mask(steps, total, after)
  return np.max(excess_over_running_min(values)[..., mask], axis=-1)


def rise_test(steps, losses_KxW, total: int, *, threshold: float = 0.02, after: float = 0.3,
              n_boot: int = 2000, ci: float = 0.95, seed: int = 0) -> dict:
  """{rise, ci_lo, ci_hi, verdict, onset_step, peak_step} of the window means (module doc)."""
  losses, steps = np.asarray(losses_KxW, np.float64), np.asarray(steps)
  if losses.ndim != 2 or losses.shape[0] != steps.shape[0]:
    raise ValueError(f"losses must be (checkpoints K={steps.shape[0]}, windows W), got "
                     f"{losses.shape}")
  mask = _after_mask(steps, total, after)
  w_n = losses.shape[1]
  mean = losses.mean(axis=1)
  exc = excess_over_running_min(mean)
  rise = float(np.max(exc[mask]))
  rng = np.random.default_rng(seed)
  counts = rng.multinomial(w_n, np.full(w_n, 1.0 / w_n), size=n_boot)  # (B, W)
  boot = excess_over_running_min(counts @ losses.T / w_n)[:, mask].max(axis=1)  # (B,)
  lo, hi = (float(x) for x in np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2]))
  verdict = ("inconclusive" if not np.isfinite(rise) else "yes" if lo >= threshold
             else "no" if hi < threshold else "inconclusive")
  idx = np.nonzero(mask)[0]
  over = idx[exc[idx] >= threshold]
  return {"rise": rise, "ci_lo": lo, "ci_hi": hi, "verdict": verdict,
          "onset_step": int(steps[over[0]]) if over.size else None,
          "peak_step": int(steps[int(idx[np.argmax(exc[idx])])])}


def binned_means(record_steps, record_values, ckpt_steps) -> np.ndarray:
  """Per checkpoint s_k: the mean of the records with s_{k-1} < step ≤ s_k; NaN if none."""
  rs, rv = np.asarray(record_steps), np.asarray(record_values, np.float64)
  out, prev = np.full(len(ckpt_steps), np.nan), -np.inf
  for k, s in enumerate(ckpt_steps):
    sel = (rs > prev) & (rs <= s)
    if sel.any():
      out[k] = rv[sel].mean()
    prev = s
  return out
