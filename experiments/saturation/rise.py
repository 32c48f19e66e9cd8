"""The late loss rise (Godey et al. 2024) as a statistic with a paired-bootstrap CI.

``L[k, w]``: the loss of checkpoint k (steps s_k ascending, of a run of ``total`` steps) on the
fixed validation window w. With ℓ_k = mean_w L[k, w] and its running minimum m_k,
R = max_{k : s_k ≥ after · total} (ℓ_k − m_k): how far the loss climbs above its best after
30% of training. ``rise_test`` resamples the windows with replacement (one draw for every
checkpoint: paired) for the percentile CI of R; its verdict against ``threshold``: "yes" when
the CI's lower end is ≥ threshold, "no" when its upper end is below it, else "inconclusive";
``onset_step``: the first checkpoint after ``after · total`` with ℓ_k − m_k ≥ threshold.

R ≥ 0 by construction, so a CI clear of 0 says nothing. ``null_level`` gives R its null: the
curve after ``after · total`` replaced by its non-increasing (isotonic) fit f_k plus noise, the
residuals of its centred moving mean over ``block`` checkpoints (scaled by 1 / √(1 − 1/block),
the variance such a mean removes from independent noise) permuted in blocks of ``block``
consecutive checkpoints (the checkpoints before stay); R recomputed on each of ``n_perm`` such
curves; the level is their ``q`` quantile and p = (1 + #{R* ≥ R}) / (1 + n_perm). The residuals
of f itself would carry the rise: the null built on them rises as much as the curve, whatever
the curve. A rise shorter than a block is not told from noise."""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression

def excess_over_running_min(values_K) -> np.ndarray:
  """ℓ_k − min_{j ≤ k} ℓ_j (≥ 0), along the last axis."""
  v = np.asarray(values_K, np.float64)
  return v - np.minimum.accumulate(v, axis=-1)


def _after_mask(steps, total: int, after: float) -> np.ndarray:
  """The checkpoints s_k ≥ after · total of the ascending ``steps``."""
  steps = np.asarray(steps)
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


def null_level(steps, mean_K, total: int, *, after: float = 0.3, q: float = 0.95,
               n_perm: int = 2000, block: int = 5, seed: int = 0) -> dict:
  """{level, p} of the rise R of the curve ``mean_K`` against its non-increasing fit plus
  block-permuted noise (module doc)."""
  if block < 2:
    raise ValueError(f"block={block}: the null's noise is the residual of a mean over a block; "
                     "use block >= 2 checkpoints")
  mean = np.asarray(mean_K, np.float64)
  mask = _after_mask(steps, total, after)
  y = mean[mask]
  fit = isotonic_regression(y, increasing=False).x
  h = block // 2
  local = np.array([y[max(0, i - h):i + block - h].mean() for i in range(y.size)])
  resid = (y - local) / np.sqrt(1 - 1 / block)
  blocks = [np.arange(i, min(i + block, resid.size)) for i in range(0, resid.size, block)]
  rng = np.random.default_rng(seed)
  order = np.stack([np.concatenate([blocks[b] for b in rng.permutation(len(blocks))])
                    for _ in range(n_perm)])  # (n_perm, K after)
  curves = np.broadcast_to(mean, (n_perm, mean.size)).copy()
  curves[:, mask] = fit + resid[order]
  null = excess_over_running_min(curves)[:, mask].max(axis=1)
  rise = float(np.max(excess_over_running_min(mean)[mask]))
  return {"level": float(np.quantile(null, q)),
          "p": float((1 + np.sum(null >= rise - 1e-12)) / (1 + n_perm))}


def binned_means(record_steps, record_values, ckpt_steps) -> np.ndarray:
  """Per checkpoint s_k: the mean of the records with s_{k-1} < step ≤ s_k; NaN if none."""
  k = np.searchsorted(np.asarray(ckpt_steps), np.asarray(record_steps), side="left")
  v, n = np.asarray(record_values, np.float64)[k < len(ckpt_steps)], len(ckpt_steps)
  sums, counts = (np.bincount(k[k < n], weights=w, minlength=n) for w in (v, None))
  with np.errstate(invalid="ignore"):
    return sums / counts
