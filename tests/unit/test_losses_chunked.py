"""Token-chunked cross-entropy (sbjax.losses, model.loss_chunk) against a plain numpy
cross-entropy with analytic gradients, against the unchunked model loss (the matrix and the
scores paths of the heads), and by XLA's compiled memory analysis (the B·T×V logits are
never allocated)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import losses
from sbjax.config import ModelConfig
from sbjax.model import Model
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead

BASE = ModelConfig(vocab_size=97, d_model=16, n_layers=1, n_heads=2, max_len=24)
# LLVM -O0: these tests check numerics, and compile time dominates tiny models.
FAST = {"xla_backend_optimization_level": 0}


def _jit(f, *args):
  """Compiled f for these arguments (one compile, at FAST options)."""
  return jax.jit(f).lower(*args).compile(FAST)


HEADS = {
    "tied": dataclasses.replace(BASE, head="tied"),
    "lowrank": dataclasses.replace(BASE, head=LowRankHead(rank=4)),
    "mos": dataclasses.replace(BASE, head=MoSHead(n_mix=3)),
}


def _numpy_xent(x, w, y):
  """Σ nll, Σ correct and the analytic gradients of Σ nll, in float64 numpy."""
  z = x @ w.T
  m = z.max(1, keepdims=True)
  lse = (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]
  nll = lse - z[np.arange(len(y)), y]
  p = np.exp(z - lse[:, None])
  p[np.arange(len(y)), y] -= 1.0
  return nll.sum(), float((z.argmax(1) == y).sum()), p @ w, p.T @ x


@pytest.mark.parametrize("chunk,v_tile", [(7, None), (1000, None), (16, 43), (16, 64)])
def test_chunked_matrix_xent_matches_numpy(chunk, v_tile, monkeypatch):
  """v_tile 43 divides V = 301 (7 tiles); 64 does not (5 tiles, the last padded). With
  chunk 1000 the forward takes all 50 tokens at once, and the fused gradient, capped at
  TRAIN_CHUNK tokens a sweep (here 32), two sweeps, the second padded."""
  monkeypatch.setattr(losses, "TRAIN_CHUNK", 32)
  rng = np.random.default_rng(0)
  n, k, v = 50, 8, 301  # 50 tokens: chunks of 7 leave a padded remainder
  x = rng.normal(size=(n, k)).astype(np.float32)
  w = rng.normal(size=(v, k)).astype(np.float32)
  y = rng.integers(0, v, n)
  nll, cor, dx, dw = _numpy_xent(x.astype(np.float64), w.astype(np.float64), y)
  f = lambda x, w: losses.chunked_matrix_xent(x, w, jnp.asarray(y), chunk, v_tile)
  got_nll, got_cor = _jit(f, x, w)(x, w)  # forward only: the primal, not the fused rule
  np.testing.assert_allclose(float(got_nll), nll, rtol=1e-5)
  assert float(got_cor) == cor
  # a scaled cotangent (as for the mean loss) scales the fused gradient
  g = jax.grad(lambda x, w: 0.25 * f(x, w)[0], argnums=(0, 1))
  gx, gw = _jit(g, x, w)(x, w)
  np.testing.assert_allclose(np.asarray(gx), 0.25 * dx, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gw), 0.25 * dw, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("v_tile", [None, 8, 7])
def test_chunked_accuracy_follows_argmax_ties(v_tile):
  """Integer logits with many ties: "correct" is argmax's first maximum, in the forward
  (one V tile, 5 tiles, 6 tiles with padding: ties inside and across tiles) and in the
  fused-gradient path."""
  rng = np.random.default_rng(3)
  n, k, v = 64, 3, 40
  x = rng.integers(-1, 2, size=(n, k)).astype(np.float32)
  w = rng.integers(-1, 2, size=(v, k)).astype(np.float32)
  z = x @ w.T
  first = z.argmax(1)
  last = v - 1 - z[:, ::-1].argmax(1)  # another maximum where there is a tie
  assert np.sum(first != last) > 10
  y = np.where(np.arange(n) % 3 == 0, first, np.where(np.arange(n) % 3 == 1, last,
                                                    rng.integers(0, v, n)))
  want = float((first == y).sum())
  f = lambda x, w: losses.chunked_matrix_xent(x, w, jnp.asarray(y), 16, v_tile)
  assert float(jax.jit(f)(x, w)[1]) == want
  (_, cor), _ = jax.jit(jax.value_and_grad(f, has_aux=True))(x, w)  # the fused fwd rule
  assert float(cor) == want


def test_chunked_scores_xent_matches_numpy():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(30, 6)).astype(np.float32)
  w = rng.normal(size=(40, 6)).astype(np.float32)
  y = rng.integers(0, 40, 30)
  nll, cor, dx, dw = _numpy_xent(x.astype(np.float64), w.astype(np.float64), y)

  def f(x, w):
    hi = jax.lax.Precision.HIGHEST  # the test's own head: float32 on every backend
    return losses.chunked_scores_xent(lambda xc: jnp.dot(xc, w.T, precision=hi), x,
                                      jnp.asarray(y), 8)

  vg = jax.value_and_grad(lambda x, w: f(x, w), argnums=(0, 1), has_aux=True)
  (got_nll, got_cor), (gx, gw) = _jit(vg, x, w)(x, w)
  np.testing.assert_allclose(float(got_nll), nll, rtol=1e-5)
  assert float(got_cor) == cor
  np.testing.assert_allclose(np.asarray(gx), dx, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(gw), dw, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("head", list(HEADS))  # dense takes the path of tied
def test_model_loss_chunked_equals_unchunked(head):
  cfg = HEADS[head]
  params = Model(cfg).init(jax.random.key(0))
  batch = jax.random.randint(jax.random.key(1), (3, 17), 0, cfg.vocab_size)  # 48 tokens
  vg = lambda c: jax.value_and_grad(Model(c).loss, has_aux=True)
  both = lambda p, b: (vg(cfg)(p, b), vg(dataclasses.replace(cfg, loss_chunk=10))(p, b))
  ((l0, a0), g0), ((l1, a1), g1) = _jit(both, params, batch)(params, batch)
  np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
  assert float(a1["acc"]) == float(a0["acc"])
  assert jax.tree.structure(g0) == jax.tree.structure(g1)
  for p0, p1 in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(np.asarray(p1), np.asarray(p0), rtol=1e-4, atol=2e-7)


def test_chunked_loss_never_allocates_full_logits():
  """XLA's compiled memory analysis: with chunks, the gradient's temporaries stay far below
  one N×V float32 array; without them they exceed it."""
  cfg = ModelConfig(vocab_size=8192, d_model=16, n_layers=1, n_heads=2, max_len=32)
  params = jax.eval_shape(lambda k: Model(cfg).init(k, 1, 8), jax.random.key(0))
  batch = jax.ShapeDtypeStruct((64, 33), jnp.int32)
  logits_bytes = 64 * 32 * cfg.vocab_size * 4  # N×V float32 = 64 MiB

  def temp_bytes(c):
    f = jax.grad(lambda p, b: Model(c).loss(p, b)[0])
    return _jit(f, params, batch).memory_analysis().temp_size_in_bytes

  full = temp_bytes(cfg)
  chunked = temp_bytes(dataclasses.replace(cfg, loss_chunk=32))  # 32×V logits = 1 MiB
  assert full >= logits_bytes, (full, logits_bytes)
  assert chunked < logits_bytes / 8, (chunked, logits_bytes)
