"""Optimizer: AdamW with Pythia's recipe, optional frozen trunk.

Defaults (``TrainConfig``): β = (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices only
(ndim ≥ 2), global-norm clipping at 1.0, linear warmup then cosine decay to ``min_lr_ratio``
(10%) of the peak learning rate. Frozen trunk: only the head's parameters (its kind's
``param_keys``) are trained; every other update is exactly zero.

Weight-decay timescales: AdamW applies p ← p − η_t (Adam(g)_t + λ p) at update t, so with zero
gradients a decayed matrix shrinks by Π_t (1 − λ η_t) ≈ exp(−Γ). After s updates

    Γ(s) = λ · Σ_{t < s} η_t          (λ = ``train.weight_decay``; η_t = ``lr_schedule(tc)(t)``)
"""

from __future__ import annotations

from sbjax._extras import require

require("sbjax.optim")

import dataclasses

import jax
import numpy as np
import optax

from sbjax import heads
from sbjax.config import ModelConfig, TrainConfig


def lr_schedule(tc: TrainConfig):
  warm = min(tc.warmup_steps, max(tc.steps - 1, 0))
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=tc.lr, warmup_steps=warm,
      decay_steps=max(tc.steps, warm + 1), end_value=tc.lr * tc.min_lr_ratio)


def decay_mask(params):
  return jax.tree.map(lambda x: x.ndim >= 2, params)


def trainable_labels(params, mc: ModelConfig, freeze_trunk: bool):
  """'train' / 'freeze' label per leaf."""
  if not freeze_trunk:
    return jax.tree.map(lambda _: "train", params)
  head_keys = heads.get(mc.head).param_keys
  return {k: jax.tree.map(lambda _: "train" if k in head_keys else "freeze", v)
          for k, v in params.items()}


def scale_updates(tx: optax.GradientTransformation, scale) -> optax.GradientTransformation:
  """``tx`` with its updates multiplied by ``scale`` (a float or a traced scalar; the same
  state structure as ``tx``)."""

  def update(grads, state, params=None):
    updates, state = tx.update(grads, state, params)
    return jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates), state

  return optax.GradientTransformation(tx.init, update)


def make_optimizer(tc: TrainConfig, mc: ModelConfig, params, *, lr_scale=None,
                   weight_decay=None) -> optax.GradientTransformation:
  """The run's AdamW (module doc). Per member of a vmapped run two values may be traced
  scalars: ``weight_decay`` (λ) and ``lr_scale`` (the member's lr / ``train.lr``): the
  update is linear in the peak lr, so scaling it is the run at lr_i up to ~1 ulp a step."""
  wd = tc.weight_decay if weight_decay is None else weight_decay
  tx = optax.chain(
      optax.clip_by_global_norm(tc.clip),
      optax.adamw(lr_schedule(tc), b1=tc.b1, b2=tc.b2, eps=tc.eps, weight_decay=wd,
                  mask=decay_mask),
  )
  if tc.freeze_trunk:
    tx = optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()},
                               trainable_labels(params, mc, True))
  return tx if lr_scale is None else scale_updates(tx, lr_scale)


def gamma_schedule(tc: TrainConfig) -> np.ndarray:
  """G of length ``tc.steps + 1`` (float64): G[s] = λ Σ_{t<s} η_t, Γ after s updates, with
  η_t the optimizer's own schedule (``lr_schedule``, evaluated in float32 as the update
  uses it, summed in float64)."""
  eta = np.asarray(jax.jit(lr_schedule(tc))(np.arange(tc.steps, dtype=np.int32)), np.float64)
  return float(tc.weight_decay) * np.concatenate([[0.0], np.cumsum(eta)])


def gamma_at(tc: TrainConfig, steps_done, table: np.ndarray | None = None):
  """Γ after ``steps_done`` updates (int or array). Beyond ``tc.steps`` the schedule stays
  at its end value η_end = lr · min_lr_ratio, so Γ grows by λ η_end per extra step."""
  g = gamma_schedule(tc) if table is None else table
  s = np.asarray(steps_done, np.int64)
  end = float(tc.weight_decay) * tc.lr * tc.min_lr_ratio
  out = g[np.minimum(s, tc.steps)] + end * np.maximum(s - tc.steps, 0)
  return float(out) if out.ndim == 0 else out


def gamma_fn(tc: TrainConfig, chunk: int = 1 << 16):
  """``f(steps_done) -> Γ`` (``gamma_at``'s values, for the train log), the schedule evaluated
  and summed one chunk of steps at a time as they are asked for (in the same order as
  ``gamma_schedule``: equal values), so that a long run never holds a value per step."""
  lr, starts = jax.jit(lr_schedule(tc)), [0.0]  # Σ η_t over the chunks before chunk k

  def eta(k: int) -> np.ndarray:
    t = np.arange(k * chunk, (k + 1) * chunk, dtype=np.int32)
    return np.asarray(lr(t), np.float64)[:max(0, min(chunk, tc.steps - k * chunk))]

  def f(steps_done: int) -> float:
    s = min(int(steps_done), tc.steps)
    while len(starts) <= s // chunk:
      starts.append(np.cumsum(np.concatenate([[starts[-1]], eta(len(starts) - 1)]))[-1])
    k = s // chunk
    g = np.cumsum(np.concatenate([[starts[k]], eta(k)[:s - k * chunk]]))[-1]
    end = float(tc.weight_decay) * tc.lr * tc.min_lr_ratio
    return float(tc.weight_decay) * g + end * max(int(steps_done) - tc.steps, 0)

  return f


def gamma_total(tc: TrainConfig) -> float:
  """Γ at the end of the run: λ Σ_{t < steps} η_t."""
  return float(gamma_schedule(tc)[-1])


def _gamma_total_np(tc: TrainConfig) -> float:
  """``gamma_total`` from the closed form of ``lr_schedule`` in numpy: η_t = lr t / w for
  t < w, else lr (m + (1 − m) (1 + cos(π min(t − w, D) / D)) / 2), D = decay_steps − w,
  m = min_lr_ratio (the step search's, without a jitted schedule per candidate)."""
  warm = min(tc.warmup_steps, max(tc.steps - 1, 0))
  dsteps = max(tc.steps, warm + 1) - warm
  t = np.arange(tc.steps, dtype=np.float64)
  cos = 0.5 * (1 + np.cos(np.pi * np.minimum(t - warm, dsteps) / dsteps))
  eta = np.where(t < warm, tc.lr * t / max(warm, 1),
                 tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * cos))
  return float(tc.weight_decay * eta.sum())


def steps_for_gamma(tc: TrainConfig, target: float, warmup_frac: float = 0.01) -> TrainConfig:
  """``tc`` with ``steps`` (and ``warmup_steps = round(warmup_frac * steps)``) chosen so
  that ``gamma_total`` is the smallest value >= ``target`` (bisection on the integer step
  count with the exact schedule; lr, min_lr_ratio and λ as in ``tc``). Pythia's recipe
  (λ = 0.1, η = 1e-2, 1% warm-up, cosine to 10%) reaches Γ = 7.9 at ≈ 14.4k steps."""
  if tc.weight_decay <= 0:
    raise ValueError(f"steps_for_gamma: train.weight_decay={tc.weight_decay} gives Γ = 0 at "
                     "every step; set a positive weight decay to specify a run by Γ")

  def with_steps(n: int) -> TrainConfig:
    return dataclasses.replace(tc, steps=n, warmup_steps=int(round(warmup_frac * n)))

  lo, hi = 1, 2
  while _gamma_total_np(with_steps(hi)) < target:
    lo, hi = hi, hi * 2
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if _gamma_total_np(with_steps(mid)) < target else (lo, mid)
  return with_steps(lo if _gamma_total_np(with_steps(lo)) >= target else hi)
