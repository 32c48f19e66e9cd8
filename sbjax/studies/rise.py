"""Late loss rise (saturation, Godey et al. 2024) as a statistic with a paired bootstrap CI.

Data: ``L[k, w]``, the expected loss of checkpoint k (steps s_k ascending, of a run of
``total`` steps) on validation window w, the SAME fixed windows for every checkpoint, so
differences between checkpoints are paired. With the mean over windows ℓ_k = mean_w L[k, w]
and its running minimum m_k = min_{j ≤ k} ℓ_j,

    R = max_{k : s_k ≥ after · total} (ℓ_k − m_k)          (after = 0.3)

is how far the loss climbs above the best it had reached, looking only after 30% of
training (an early transient does not count; the minimum may be from before 30%).

Paired bootstrap (``rise_test``): resample the W windows with replacement (the same draw
for every checkpoint, which keeps the pairing), recompute R* from the resampled means;
the CI is the percentile interval of R* at level ``ci``. Verdict against ``threshold``
(0.02 nats): ``"yes"`` when the CI's lower end is ≥ threshold, ``"no"`` when its upper end
is < threshold, else ``"inconclusive"``. ``onset_step``: the first checkpoint after
``after · total`` with ℓ_k − m_k ≥ threshold (None if none); ``peak_step``: the arg-max of R.

The training loss on fresh batches (``binned_means`` of the train records between
checkpoints) gets the point statistic ``rise_statistic`` (no CI: each batch is new), so a
report can say whether it moves the same way.

All numpy; a series of NaN (a diverged checkpoint) propagates NaN, it never raises.
"""

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
  """The rise statistic of the window means with its paired-bootstrap CI (module doc).

  Returns {rise, ci_lo, ci_hi, verdict, onset_step, peak_step, min_step, threshold, after,
  n_windows, n_boot}."""
  losses = np.asarray(losses_KxW, np.float64)
  steps = np.asarray(steps)
  if losses.ndim != 2 or losses.shape[0] != steps.shape[0]:
    raise ValueError(f"losses must be (checkpoints K={steps.shape[0]}, windows W), got "
                     f"{losses.shape}")
  mask = _after_mask(steps, total, after)
  k_n, w_n = losses.shape
  mean = losses.mean(axis=1)
  exc = excess_over_running_min(mean)
  rise = float(np.max(exc[mask]))
  rng = np.random.default_rng(seed)
  counts = rng.multinomial(w_n, np.full(w_n, 1.0 / w_n), size=n_boot)  # (B, W)
  boot = excess_over_running_min(counts @ losses.T / w_n)[:, mask].max(axis=1)  # (B,)
  lo, hi = (float(x) for x in np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2]))
  verdict = "yes" if lo >= threshold else "no" if hi < threshold else "inconclusive"
  if not np.isfinite(rise):
    verdict = "inconclusive"
  idx = np.nonzero(mask)[0]
  over = idx[exc[idx] >= threshold]
  peak = int(idx[np.argmax(exc[idx])])
  return {"rise": rise, "ci_lo": lo, "ci_hi": hi, "verdict": verdict,
          "onset_step": int(steps[over[0]]) if over.size else None,
          "peak_step": int(steps[peak]),
          "min_step": int(steps[int(np.argmin(mean[:peak + 1]))]),
          "threshold": threshold, "after": after, "n_windows": w_n, "n_boot": n_boot}


def binned_means(record_steps, record_values, ckpt_steps) -> np.ndarray:
  """For each checkpoint s_k: the mean of the records with s_{k-1} < step ≤ s_k (the
  train losses logged since the previous checkpoint); NaN where there are none."""
  rs, rv = np.asarray(record_steps), np.asarray(record_values, np.float64)
  edges = np.asarray(ckpt_steps)
  out = np.full(len(edges), np.nan)
  prev = -np.inf
  for k, s in enumerate(edges):
    sel = (rs > prev) & (rs <= s)
    if sel.any():
      out[k] = rv[sel].mean()
    prev = s
  return out
