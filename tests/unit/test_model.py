"""sbjax.model: causality, init, scan/remat, attention kernels, intermediates, bf16 compute."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import heads
from sbjax.config import ModelConfig
from sbjax.heads.lowrank import LowRankHead
from sbjax.model import Model, stack_blocks, unstack_blocks

BASE = ModelConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, max_len=24)
NEO = dataclasses.replace(BASE, pos="learned", parallel_residual=False, gelu="tanh",
                          qkv_bias=False, attn_scale=False, head="tied",
                          attention_layers=("global", "local"), window_size=5)


def _tokens(b=2, t=16, v=48, seed=1):
  return jax.random.randint(jax.random.key(seed), (b, t), 0, v)


@pytest.mark.parametrize("cfg", [BASE, NEO], ids=["pythia", "neo"])
def test_causality_gradient_is_exactly_zero(cfg):
  """d(scores at position t) / d(input embeddings at positions > t) is exactly 0."""
  model = Model(cfg)
  params = model.init(jax.random.key(0))
  toks = _tokens()
  ts = (0, 7, 14)
  grad_at = jax.jit(jax.vmap(jax.grad(
      lambda e, t: jnp.take(model.apply(params, toks, embeds_BxTxD=e), t, axis=1).sum()),
      in_axes=(None, 0)))
  for t, g in zip(ts, np.asarray(grad_at(params["embed"][toks], jnp.array(ts)))):
    assert np.all(g[:, t + 1:] == 0.0) and np.any(g[:, :t + 1] != 0.0), t


def test_lowrank_head_init_variances():
  """scaled: A·B has the dense head's std and rank r; godey: unit-variance factors."""
  cfg = dataclasses.replace(BASE, vocab_size=2000, d_model=64, head=LowRankHead(rank=8))
  mod = heads.make_head(cfg)
  w = np.asarray(heads.head_matrix({"head": mod.init(jax.random.key(0), jnp.zeros((1, 64)))[
      "params"]}, cfg))
  assert abs(w.std() - cfg.init_std) / cfg.init_std < 0.1 and np.linalg.matrix_rank(w) == 8
  godey = dataclasses.replace(cfg, head=LowRankHead(rank=8, init="godey"))
  g = heads.make_head(godey).init(jax.random.key(0), jnp.zeros((1, 64)))["params"]
  assert abs(float(g["a"].std()) - 1.0) < 0.05 and abs(float(g["b"].std()) - 1.0) < 0.1


def test_scan_and_remat_equal_unrolled():
  model = Model(BASE)
  p = model.init(jax.random.key(0))
  toks = _tokens()
  batch = jnp.concatenate([toks, toks[:, :1]], 1)

  def out_and_grad(m):
    return jax.jit(lambda q: (m.forward(q, toks, collect=("resid",)),
                              jax.grad(lambda r: m.loss(r, batch)[0])(q)))

  (ref, ex_ref), g_ref = out_and_grad(model)(p)
  (out, ex), g = out_and_grad(Model(dataclasses.replace(BASE, scan_layers=True, remat="dots")))(
      stack_blocks(p, BASE.n_layers))
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ex["resid"], ex_ref["resid"], atol=1e-5)
  for a, b in zip(jax.tree.leaves(unstack_blocks(g, BASE.n_layers)), jax.tree.leaves(g_ref)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  out2 = Model(dataclasses.replace(BASE, remat="full")).apply(p, toks)  # unrolled remat
  np.testing.assert_allclose(out2, ref, rtol=1e-5, atol=1e-5)


def test_attn_impl_dpa_and_einsum_give_the_same_model():
  """model.attn_impl only changes the kernel: loss and gradients agree, local layers too."""
  toks = _tokens(2, 12)
  p = Model(NEO).init(jax.random.key(0))
  outs = [jax.jit(jax.value_and_grad(lambda q, m=m: m.loss(q, toks)[0]))(p) for m in (
      Model(dataclasses.replace(NEO, attn_impl=impl)) for impl in ("dpa", "einsum"))]
  np.testing.assert_allclose(float(outs[1][0]), float(outs[0][0]), rtol=1e-6)
  for a, b in zip(jax.tree.leaves(outs[1][1]), jax.tree.leaves(outs[0][1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_intermediates_shapes_and_consistency():
  model = Model(BASE)
  p = model.init(jax.random.key(0))
  toks = _tokens()
  scores, ex = model.forward(p, toks, collect=("resid", "attn", "mlp", "ov", "h"))
  assert ex["resid"].shape == (2, 2, 16, 32) and ex["h"].shape == (2, 16, 32)
  np.testing.assert_array_equal(model.apply(p, toks, embeds_BxTxD=p["embed"][toks]), scores)
  with pytest.raises(ValueError, match="unknown intermediates"):
    model.forward(p, toks, collect=("logits",))
  with pytest.raises(ValueError, match="sequence length 30 exceeds model.max_len=24"):
    model.apply(p, _tokens(1, 30))


def test_bf16_compute_keeps_f32_params_and_loss():
  model = Model(dataclasses.replace(BASE, dtype="bfloat16"))
  p = model.init(jax.random.key(0))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p))
  toks = _tokens()
  out = model.apply(p, toks)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(out, Model(BASE).apply(p, toks), atol=0.1)
  loss, _ = model.loss(p, jnp.concatenate([toks, toks[:, :1]], 1))
  assert loss.dtype == jnp.float32 and np.isfinite(float(loss))
