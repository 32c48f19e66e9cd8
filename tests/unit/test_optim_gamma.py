"""Γ = λ Σ η (sbjax.optim): the logged weight-decay timescales against an independent numpy
sum of the warm-up + cosine schedule, against the optimizer's own decay of a matrix with
zero gradients (Π (1 − λ η_t)), and the step search for a target Γ."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import optim
from sbjax.config import ModelConfig, TrainConfig


def eta_numpy(lr, steps, warm, min_ratio):
  """The Pythia schedule written out: linear warm-up from 0, then cosine to min_ratio * lr."""
  t = np.arange(steps, dtype=np.float64)
  frac = np.clip((t - warm) / (steps - warm), 0, 1)
  cos = lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + np.cos(np.pi * frac)))
  return np.where(t < warm, lr * t / warm, cos)


@pytest.mark.parametrize("lr,wd,steps,warm,ratio", [(1e-2, 0.1, 200, 2, 0.1),
                                                    (1e-3, 0.0, 30, 3, 0.1)])
def test_gamma_equals_lambda_sum_eta(lr, wd, steps, warm, ratio):
  tc = TrainConfig(lr=lr, weight_decay=wd, steps=steps, warmup_steps=warm, min_lr_ratio=ratio)
  ref = wd * np.concatenate([[0.0], np.cumsum(eta_numpy(lr, steps, warm, ratio))])
  g = optim.gamma_schedule(tc)
  np.testing.assert_allclose(g, ref, rtol=2e-6, atol=1e-12)
  assert optim.gamma_total(tc) == pytest.approx(ref[-1], rel=2e-6)
  assert optim._gamma_total_np(tc) == pytest.approx(ref[-1], rel=1e-12)
  # beyond the schedule: the end learning rate
  assert optim.gamma_at(tc, steps + 10) == pytest.approx(ref[-1] + 10 * wd * lr * ratio, rel=2e-6)
  np.testing.assert_allclose(optim.gamma_at(tc, [0, 5, steps]), ref[[0, 5, steps]], rtol=2e-6)


def test_gamma_is_the_optimizers_decay():
  """With zero gradients AdamW only decays: W_s = W_0 Π_{t<s} (1 − λ η_t) ≈ W_0 exp(−Γ(s))."""
  tc = TrainConfig(lr=0.05, weight_decay=0.2, steps=40, warmup_steps=4)
  params = {"w": jnp.ones((3, 2)), "b": jnp.ones((2,))}
  tx = optim.make_optimizer(tc, ModelConfig(), params)

  def body(carry, _):
    p, s = carry
    u, s = tx.update(jax.tree.map(jnp.zeros_like, p), s, p)
    p = jax.tree.map(lambda a, b: a + b, p, u)
    return (p, s), p["w"][0, 0]

  _, w = jax.lax.scan(body, (params, tx.init(params)), None, length=tc.steps)
  w = np.asarray(w, np.float64)
  eta = eta_numpy(tc.lr, tc.steps, 4, tc.min_lr_ratio)
  np.testing.assert_allclose(w, np.cumprod(1 - tc.weight_decay * eta), rtol=1e-5)
  g = optim.gamma_schedule(tc)
  np.testing.assert_allclose(-np.log(w[-1]), g[-1], rtol=0.02)  # −log Π(1−x) ≈ Σ x


def test_steps_for_gamma():
  base = TrainConfig(lr=1e-2, weight_decay=0.1)
  tc = optim.steps_for_gamma(base, 7.9)
  assert tc.warmup_steps == round(0.01 * tc.steps)
  assert optim._gamma_total_np(tc) >= 7.9
  shorter = dataclasses.replace(tc, steps=tc.steps - 1, warmup_steps=round(0.01 * (tc.steps - 1)))
  assert optim._gamma_total_np(shorter) < 7.9
  # the closed form: Σ η ≈ n lr (0.01 / 2 + 0.99 (1 + 0.1) / 2)
  assert tc.steps == pytest.approx(7.9 / (0.1 * 1e-2 * (0.005 + 0.99 * 0.55)), rel=1e-3)
  with pytest.raises(ValueError, match="weight_decay=0.0 gives"):
    optim.steps_for_gamma(dataclasses.replace(base, weight_decay=0.0), 1.0)
  assert math.isfinite(optim.gamma_total(dataclasses.replace(base, steps=10)))
