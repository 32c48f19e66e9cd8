"""Optimizer: AdamW with Pythia's recipe, optional frozen trunk.

Defaults (``TrainConfig``): β = (0.9, 0.95), eps 1e-8, weight decay 0.1 on
matrices only (ndim ≥ 2: no biases, no norms), global-norm clipping at 1.0, linear
warmup then cosine decay to ``min_lr_ratio`` (10%) of the peak learning rate.

Frozen trunk (Godey et al. E5): only the head's parameters are trained (its kind's
``param_keys``: ``head``, or the embedding for a tied head); every other update is
exactly zero.
"""

from __future__ import annotations

import jax
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


def make_optimizer(tc: TrainConfig, mc: ModelConfig, params) -> optax.GradientTransformation:
  tx = optax.chain(
      optax.clip_by_global_norm(tc.clip),
      optax.adamw(lr_schedule(tc), b1=tc.b1, b2=tc.b2, eps=tc.eps,
                  weight_decay=tc.weight_decay, mask=decay_mask),
  )
  if tc.freeze_trunk:
    tx = optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()},
                               trainable_labels(params, mc, True))
  return tx
