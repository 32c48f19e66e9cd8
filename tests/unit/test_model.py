"""Model and heads: causality, head equivalences, vmap over checkpoints, remat/scan, attention."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import heads
from sbjax.config import ModelConfig
from sbjax.model import (Model, attention_reference, stack_blocks, unstack_blocks,
                         use_einsum_attention)
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead

BASE = ModelConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, max_len=24)
VARIANTS = {
    "pythia": BASE,
    "neo": dataclasses.replace(BASE, pos="learned", parallel_residual=False, gelu="tanh",
                               qkv_bias=False, attn_scale=False, head="tied",
                               attention_layers=("global", "local"), window_size=5),
    "lowrank": dataclasses.replace(BASE, head=LowRankHead(rank=4)),
    "mos": dataclasses.replace(BASE, head=MoSHead(n_mix=3)),
}


def _tokens(b=2, t=16, v=48, seed=1):
  return jax.random.randint(jax.random.key(seed), (b, t), 0, v)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_causality_gradient_is_exactly_zero(name):
  """d(scores at position t) / d(input embeddings at positions > t) is exactly 0."""
  cfg = VARIANTS[name]
  model = Model(cfg)
  params = model.init(jax.random.key(0))
  toks = _tokens()
  e0 = params["embed"][toks]
  ts = (0, 7, 14)
  # one jitted program for the three positions (eager op-by-op dispatch cost ~2x the CPU)
  grad_at = jax.jit(jax.vmap(jax.grad(
      lambda e, t: jnp.take(model.apply(params, toks, embeds_BxTxD=e), t, axis=1).sum()),
      in_axes=(None, 0)))
  g_all = np.asarray(grad_at(e0, jnp.array(ts)))
  for t, g in zip(ts, g_all):
    assert np.all(g[:, t + 1:] == 0.0), f"position {t} depends on the future"
    assert np.any(g[:, : t + 1] != 0.0)


def test_embeds_path_equals_token_path():
  model = Model(VARIANTS["neo"])
  p = model.init(jax.random.key(0))
  toks = _tokens()
  np.testing.assert_array_equal(np.asarray(model.apply(p, toks)),
                                np.asarray(model.apply(p, toks, embeds_BxTxD=p["embed"][toks])))


def test_lowrank_full_rank_equals_dense():
  dense_cfg = BASE
  lr_cfg = dataclasses.replace(BASE, head=LowRankHead(rank=BASE.d_model))
  dense = Model(dense_cfg)
  p = dense.init(jax.random.key(0))
  w = p["head"]["w"]
  # A·B = W with A = W, B = I (r = d)
  p_lr = dict(p)
  p_lr["head"] = {"a": w, "b": jnp.eye(BASE.d_model)}
  toks = _tokens()
  a = dense.apply(p, toks)
  b = Model(lr_cfg).apply(p_lr, toks)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(heads.head_matrix(p_lr, lr_cfg)), np.asarray(w), atol=1e-6)


def test_lowrank_init_variances():
  cfg = dataclasses.replace(BASE, vocab_size=2000, d_model=64, n_heads=4, head=LowRankHead(rank=8))
  p = Model(cfg).init(jax.random.key(0))
  w = np.asarray(heads.head_matrix(p, cfg))
  assert abs(w.std() - cfg.init_std) / cfg.init_std < 0.1
  godey = dataclasses.replace(cfg, head=LowRankHead(rank=8, init="godey"))
  g = Model(godey).init(jax.random.key(0))
  assert abs(float(g["head"]["a"].std()) - 1.0) < 0.05
  assert abs(float(g["head"]["b"].std()) - 1.0) < 0.1
  assert np.linalg.matrix_rank(w) == 8


def test_mos_single_component_is_log_softmax_of_it():
  cfg = dataclasses.replace(BASE, head=MoSHead(n_mix=1))
  model = Model(cfg)
  p = model.init(jax.random.key(0))
  toks = _tokens()
  out, ex = model.forward(p, toks, collect=("h",))
  h = ex["h"]
  hp = p["head"]
  g = jnp.tanh(jnp.einsum("btd,dme->btme", h, hp["proj_w"]) + hp["proj_b"])[:, :, 0]
  ref = jax.nn.log_softmax(g @ hp["w"].T, axis=-1)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)
  # normalised
  np.testing.assert_allclose(np.asarray(jax.nn.logsumexp(out, -1)), 0.0, atol=1e-5)


def test_mos_is_normalised_mixture():
  cfg = dataclasses.replace(BASE, head=MoSHead(n_mix=4))
  model = Model(cfg)
  p = model.init(jax.random.key(3))
  out = model.apply(p, _tokens())
  np.testing.assert_allclose(np.asarray(jnp.exp(out).sum(-1)), 1.0, atol=1e-5)


def test_vmap_over_stacked_checkpoints_equals_separate_calls():
  model = Model(BASE)
  ps = [model.init(jax.random.key(i)) for i in range(3)]
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *ps)
  toks = _tokens()
  out = jax.jit(jax.vmap(model.apply, in_axes=(0, None)))(stacked, toks)
  for i in range(3):
    np.testing.assert_allclose(np.asarray(out[i]), np.asarray(model.apply(ps[i], toks)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["pythia", "neo"])
def test_scan_and_remat_equal_unrolled(name):
  cfg = VARIANTS[name]
  if cfg.attention_layers:
    cfg = dataclasses.replace(cfg, attention_layers=())
  model = Model(cfg)
  p = model.init(jax.random.key(0))
  toks = _tokens()
  batch = jnp.concatenate([toks, toks[:, :1]], 1)

  def out_and_grad(m):  # one jitted program per variant (eager dispatch cost ~1.3x the CPU)
    return jax.jit(lambda q: (m.forward(q, toks, collect=("resid", "h")),
                              jax.grad(lambda r: m.loss(r, batch)[0])(q)))

  (ref, ex_ref), g_ref = out_and_grad(model)(p)
  for remat in ("none", "full", "dots"):
    scfg = dataclasses.replace(cfg, scan_layers=True, remat=remat)
    sp = stack_blocks(p, cfg.n_layers)
    (out, ex), g = out_and_grad(Model(scfg))(sp)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ex["resid"]), np.asarray(ex_ref["resid"]), atol=1e-5)
    g = unstack_blocks(g, cfg.n_layers)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    # unrolled remat too
    out2 = Model(dataclasses.replace(cfg, remat=remat)).apply(p, toks)
    np.testing.assert_allclose(np.asarray(out2), np.asarray(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 3])
def test_dot_product_attention_equals_einsum_reference(window):
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(k1, (2, 12, 4, 8))
  k = jax.random.normal(k2, (2, 12, 4, 8))
  v = jax.random.normal(k3, (2, 12, 4, 8))
  ref = attention_reference(q, k, v, scale=0.3, window=window)
  out = jax.nn.dot_product_attention(q, k, v, scale=0.3, is_causal=True,
                                     local_window_size=None if window is None else (window - 1, 0))
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)


@pytest.mark.parametrize("variant", ["pythia", "neo"])
def test_attn_impl_dpa_and_einsum_give_the_same_model(variant):
  """model.attn_impl only changes the kernel: loss and gradients agree, local layers too;
  "auto" takes the einsum kernel on CPU."""
  base = VARIANTS[variant]
  toks = _tokens(2, 12)
  p = Model(base).init(jax.random.key(0))
  outs = {}
  for impl in ("dpa", "einsum"):
    m = Model(dataclasses.replace(base, attn_impl=impl))
    outs[impl] = jax.jit(jax.value_and_grad(lambda q, m=m: m.loss(q, toks)[0]))(p)
  np.testing.assert_allclose(float(outs["einsum"][0]), float(outs["dpa"][0]), rtol=1e-6)
  for a, b in zip(jax.tree.leaves(outs["einsum"][1]), jax.tree.leaves(outs["dpa"][1])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
  assert use_einsum_attention(dataclasses.replace(base, attn_impl="auto")) == (
      jax.default_backend() == "cpu")
  assert not use_einsum_attention(dataclasses.replace(base, attn_impl="dpa"))
  with pytest.raises(ValueError, match="model.attn_impl"):
    dataclasses.replace(base, attn_impl="flash")


def test_local_attention_window_limits_receptive_field():
  cfg = dataclasses.replace(VARIANTS["neo"], n_layers=1, attention_layers=("local",), window_size=3,
                            parallel_residual=False)
  model = Model(cfg)
  p = model.init(jax.random.key(0))
  toks = _tokens(1, 12)
  base = model.apply(p, toks)
  # changing token 2 affects position 3 and 4 (window 3: positions i-2..i) but not position 5
  toks2 = toks.at[0, 2].set((toks[0, 2] + 1) % cfg.vocab_size)
  out = model.apply(p, toks2)
  diff = np.abs(np.asarray(out - base)).max(-1)[0]
  assert diff[4] > 0 and diff[5] == 0 and diff[8] == 0


def test_intermediates_shapes_and_consistency():
  model = Model(BASE)
  p = model.init(jax.random.key(0))
  toks = _tokens()
  scores, ex = model.forward(p, toks, collect=("resid", "attn", "mlp", "ov", "h"))
  assert ex["resid"].shape == (2, 2, 16, 32) and ex["h"].shape == (2, 16, 32)
  # parallel residual: resid_l = resid_{l-1} + attn_l + mlp_l
  e0 = p["embed"][toks]
  np.testing.assert_allclose(np.asarray(ex["resid"][0]),
                             np.asarray(e0 + ex["attn"][0] + ex["mlp"][0]), atol=1e-5)
  np.testing.assert_allclose(np.asarray(scores), np.asarray(ex["h"] @ p["head"]["w"].T), atol=1e-5)
  assert isinstance(model.apply(p, toks), jax.Array)  # nothing requested: scores only


def test_bf16_compute_keeps_f32_params_and_loss():
  cfg = dataclasses.replace(BASE, dtype="bfloat16")
  model = Model(cfg)
  p = model.init(jax.random.key(0))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p))
  toks = _tokens()
  out = model.apply(p, toks)
  assert out.dtype == jnp.float32
  ref = Model(BASE).apply(p, toks)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=0.1)
  loss, _ = model.loss(p, jnp.concatenate([toks, toks[:, :1]], 1))
  assert loss.dtype == jnp.float32 and np.isfinite(float(loss))


@pytest.mark.parametrize("kwargs,needle", [
    (dict(head=LowRankHead(rank=33)), "model.head.rank=33; allowed: 1 .. d_model=32"),
    (dict(head=LowRankHead(rank=-1)), "model.head.rank=-1"),
    (dict(head={"kind": "mos", "n_mix": 0}), "model.head.n_mix=0; allowed: an integer >= 1"),
    (dict(head="softmax2"), "model.head='softmax2'; allowed: dense | tied | lowrank | mos | sigsoftmax"),
    (dict(n_heads=5), "model.n_heads=5; allowed: a divisor of model.d_model=32"),
    (dict(pos="alibi"), "model.pos='alibi'"),
    (dict(attention_layers=("global",)), "model.attention_layers"),
    (dict(remat="sometimes"), "model.remat='sometimes'"),
])
def test_bad_model_configs_raise_clear_errors(kwargs, needle):
  with pytest.raises(ValueError) as e:
    dataclasses.replace(BASE, **kwargs)
  assert needle in str(e.value)


def test_sequence_longer_than_max_len_is_refused():
  model = Model(BASE)
  p = model.init(jax.random.key(0))
  with pytest.raises(ValueError, match="sequence length 30 exceeds model.max_len=24"):
    model.apply(p, _tokens(1, 30))


def test_unknown_intermediate_is_refused():
  model = Model(BASE)
  p = model.init(jax.random.key(0))
  with pytest.raises(ValueError, match="unknown intermediates"):
    model.forward(p, _tokens(), collect=("logits",))
