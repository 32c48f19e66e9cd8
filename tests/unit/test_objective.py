"""train.objective=expected: the Rao-Blackwellised loss against a numpy reference, its
context indexing, and a short training run through ``train``."""

import dataclasses

import jax
import numpy as np
import pytest

from sbjax import configs
from sbjax.config import Config
from sbjax.data import sources
from sbjax.model import Model
from sbjax import losses
from sbjax.train import read_metrics, train
from sbjax.train.build import objective_loss


def _cfg(context=1, **train_kw) -> Config:
  cfg = configs.load("tiny")
  data = cfg.data.replace_options(vocab=16, context=context, train_tokens=20_000,
                                  val_tokens=2048)
  model = dataclasses.replace(cfg.model, vocab_size=16, d_model=16, n_layers=1)
  train_cfg = dataclasses.replace(cfg.train, objective="expected", **train_kw)
  return cfg.replace(model=model, data=data, train=train_cfg)


def _context_ref(x, n, vocab):
  """Reference: loop over positions, digits oldest first."""
  out = np.full(x.shape, -1, np.int64)
  for b in range(x.shape[0]):
    for t in range(n - 1, x.shape[1]):
      c = 0
      for tok in x[b, t - n + 1:t + 1]:
        c = c * vocab + int(tok)
      out[b, t] = c
  return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_context_ids_match_a_loop(n):
  x = np.random.default_rng(n).integers(0, 7, (3, 9))
  np.testing.assert_array_equal(np.asarray(losses.context_ids(x, n, 7)), _context_ref(x, n, 7))


def test_expected_loss_equals_numpy():
  context = 2  # two-token contexts: the indexing of test_context_ids_match_a_loop
  cfg = _cfg(context)
  lang = sources.get(cfg.data.source).language(cfg.data.options)
  model = Model(cfg.model)
  params = model.init(jax.random.key(0), 1, 16)
  batch = lang.sample(np.random.default_rng(1), (4, 17)).astype(np.int32)
  value, aux = jax.jit(objective_loss(cfg, model))(params, batch)
  logq = np.asarray(jax.nn.log_softmax(model.apply(params, batch[:, :-1]), -1), np.float64)
  c = _context_ref(batch[:, :-1], context, 16)
  ok = c >= 0
  ref = -(lang.probs[c[ok]] * logq[ok]).sum(-1).mean()
  np.testing.assert_allclose(float(value), ref, rtol=1e-5)
  acc = (logq.argmax(-1) == batch[:, 1:]).mean()
  np.testing.assert_allclose(float(aux["acc"]), acc, atol=1e-6)
  # L_RB − mean H(P(.|c_t)) is a mean KL: non-negative
  ent = -(lang.probs * lang.log_probs).sum(-1)
  assert float(value) >= ent[c[ok]].mean() - 1e-5


def test_training_with_the_expected_loss(tmp_path):
  cfg = _cfg(1, steps=30, eval_every=30, ckpt_every=30, log_every=10, lr=1e-2)
  lang = sources.get(cfg.data.source).language(cfg.data.options)
  train(cfg, tmp_path / "one", quiet=True)
  rows = [r for r in read_metrics(tmp_path / "one") if "loss" in r]
  assert rows[-1]["loss"] < rows[0]["loss"] - 0.3, rows
  assert rows[-1]["loss"] >= lang.entropy - 0.05  # a batch mean of KL + H(P(.|c)) ≥ ~H
