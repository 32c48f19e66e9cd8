"""A functional decoder-only transformer (GPT-NeoX/Pythia and GPT-Neo styles).

Parameters are a plain pytree and the forward is a pure function, so it composes with
``jax.vmap`` over stacked checkpoints::

    model = Model(cfg)
    params = model.init(jax.random.key(0))
    logits_BxLxV = model.apply(params, tokens_BxL)
    jax.vmap(model.apply, in_axes=(0, None))(stacked_params, tokens_BxL)

Parameter layout (``scan_layers=False``; with scan the blocks are stacked under ``blocks``
with a leading layer axis, see ``stack_blocks``/``unstack_blocks``)::

    embed V×D; pos_embed max_len×D (pos="learned"); ln_f/{scale,bias} D
    block_i/ln1, ln2/{scale,bias} D
    block_i/attn/{q,k,v}_kernel D×H×Dh, {q,k,v}_bias H×Dh (qkv_bias); o_kernel H×Dh×D, o_bias D
    block_i/mlp/fc_in_kernel D×F, fc_in_bias F, fc_out_kernel F×D, fc_out_bias D
    head/...                       the head's own parameters, see sbjax.heads

Intermediates (``collect=``), each L×B×T×D: ``resid`` (after each block), ``attn``, ``mlp``
(each block's outputs), ``ov`` (the OV circuit Σ_h (x W_V,h + b_V,h) W_O,h of the block's
normalised input, no attention weighting; Diehl Martinez et al. 2024); and ``h`` (final-norm
features, B×T×D).
"""

from __future__ import annotations

from sbjax._extras import require

require("sbjax.model")

import functools
import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from sbjax import attention
from sbjax import heads as heads_lib
from sbjax import losses
from sbjax import sharding
from sbjax.config import ModelConfig
from sbjax.precision import matmul_precision

COLLECTABLE = ("resid", "attn", "mlp", "ov", "h")


class LayerNorm(nn.Module):
  """LayerNorm with bias, computed in float32, output in the compute dtype."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.cfg
    scale = self.param("scale", nn.initializers.ones, (c.d_model,), jnp.dtype(c.param_dtype))
    bias = self.param("bias", nn.initializers.zeros, (c.d_model,), jnp.dtype(c.param_dtype))
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + c.ln_eps)
    y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
    return y.astype(jnp.dtype(c.dtype))


def rotary(x_BxTxHxK, positions_T, rotary_dim: int, base: float):
  """GPT-NeoX rotary embedding on the first ``rotary_dim`` dims of each head (rotate_half)."""
  if rotary_dim == 0:
    return x_BxTxHxK
  inv_freq = 1.0 / (base ** (jnp.arange(0, rotary_dim, 2, dtype=jnp.float32) / rotary_dim))
  freqs = positions_T.astype(jnp.float32)[:, None] * inv_freq[None, :]
  emb = jnp.concatenate([freqs, freqs], axis=-1)  # T×rot
  cos, sin = jnp.cos(emb)[None, :, None, :], jnp.sin(emb)[None, :, None, :]
  x_rot = x_BxTxHxK[..., :rotary_dim].astype(jnp.float32)
  x_pass = x_BxTxHxK[..., rotary_dim:]
  half = rotary_dim // 2
  rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
  out = (x_rot * cos + rotated * sin).astype(x_BxTxHxK.dtype)
  return jnp.concatenate([out, x_pass], axis=-1)


class Attention(nn.Module):
  cfg: ModelConfig
  local: bool = False

  @nn.compact
  def __call__(self, x_BxTxD, positions_T, want_ov: bool = False):
    c = self.cfg
    pd, dt = jnp.dtype(c.param_dtype), jnp.dtype(c.dtype)
    h, k = c.n_heads, c.head_dim
    prec = matmul_precision(c)  # sbjax.precision: HIGHEST for float32 compute
    init = nn.initializers.normal(c.init_std)
    out_init = nn.initializers.normal(c.init_std / math.sqrt(2 * c.n_layers))

    def proj(name):
      w = self.param(f"{name}_kernel", init, (c.d_model, h, k), pd)
      y = jnp.einsum("btd,dhk->bthk", x_BxTxD, w.astype(dt), precision=prec)
      if c.qkv_bias:
        y = y + self.param(f"{name}_bias", nn.initializers.zeros, (h, k), pd).astype(dt)
      return y

    q, kk, v = proj("q"), proj("k"), proj("v")
    q = rotary(q, positions_T, c.rotary_dim, c.rotary_base)
    kk = rotary(kk, positions_T, c.rotary_dim, c.rotary_base)
    scale = 1.0 / math.sqrt(k) if c.attn_scale else 1.0
    ctx = attention.attend(c, q, kk, v, scale=scale, local=self.local)  # sbjax.attention
    wo = self.param("o_kernel", out_init, (h, k, c.d_model), pd).astype(dt)
    bo = self.param("o_bias", nn.initializers.zeros, (c.d_model,), pd).astype(dt)
    out = jnp.einsum("bthk,hkd->btd", ctx, wo, precision=prec) + bo
    ov = jnp.einsum("bthk,hkd->btd", v, wo, precision=prec) if want_ov else None
    return out, ov


class MLP(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.cfg
    pd, dt = jnp.dtype(c.param_dtype), jnp.dtype(c.dtype)
    init = nn.initializers.normal(c.init_std)
    out_init = nn.initializers.normal(c.init_std / math.sqrt(2 * c.n_layers))
    w1 = self.param("fc_in_kernel", init, (c.d_model, c.ff_dim), pd).astype(dt)
    b1 = self.param("fc_in_bias", nn.initializers.zeros, (c.ff_dim,), pd).astype(dt)
    w2 = self.param("fc_out_kernel", out_init, (c.ff_dim, c.d_model), pd).astype(dt)
    b2 = self.param("fc_out_bias", nn.initializers.zeros, (c.d_model,), pd).astype(dt)
    prec = matmul_precision(c)
    y = jax.nn.gelu(jnp.matmul(x, w1, precision=prec) + b1, approximate=(c.gelu == "tanh"))
    return jnp.matmul(y, w2, precision=prec) + b2


class Block(nn.Module):
  cfg: ModelConfig
  local: bool = False
  collect: tuple = ()

  @nn.compact
  def __call__(self, x, positions_T):
    c = self.cfg
    want_ov = "ov" in self.collect
    a_in = LayerNorm(c, name="ln1")(x)
    attn_out, ov = Attention(c, self.local, name="attn")(a_in, positions_T, want_ov)
    if c.parallel_residual:
      mlp_out = MLP(c, name="mlp")(LayerNorm(c, name="ln2")(x))
      x = x + attn_out + mlp_out
    else:
      x = x + attn_out
      mlp_out = MLP(c, name="mlp")(LayerNorm(c, name="ln2")(x))
      x = x + mlp_out
    out = {"resid": x, "attn": attn_out, "mlp": mlp_out, "ov": ov}
    return x, {k: out[k] for k in self.collect}


def _remat(cls, cfg: ModelConfig):
  if cfg.remat == "none":
    return cls
  policy = jax.checkpoint_policies.dots_saveable if cfg.remat == "dots" else None
  return nn.remat(cls, policy=policy, prevent_cse=not cfg.scan_layers)


class Transformer(nn.Module):
  """The linen module behind ``Model``; use ``Model`` for the functional API."""

  cfg: ModelConfig
  collect: tuple = ()
  features_only: bool = False  # return the final-norm features h instead of the scores

  @nn.compact
  def __call__(self, tokens_BxT, embeds_BxTxD=None):
    c = self.cfg
    t = tokens_BxT.shape[1]
    if t > c.max_len:
      raise ValueError(f"sequence length {t} exceeds model.max_len={c.max_len}; "
                       "use shorter sequences or a larger model.max_len")
    pd, dt = jnp.dtype(c.param_dtype), jnp.dtype(c.dtype)
    emb = self.param("embed", nn.initializers.normal(c.init_std), (c.vocab_size, c.d_model), pd)
    if embeds_BxTxD is None:
      x = sharding.embed_lookup(emb, tokens_BxT).astype(dt)  # = jnp.take, mesh-aware
    else:  # given input embeddings (as HF's inputs_embeds), e.g. for gradients w.r.t. inputs
      x = embeds_BxTxD.astype(dt)
    positions = jnp.arange(t)
    if c.pos == "learned":
      pe = self.param("pos_embed", nn.initializers.normal(c.init_std), (c.max_len, c.d_model), pd)
      x = x + pe[:t].astype(dt)[None]
    block_collect = tuple(k for k in self.collect if k != "h")
    kinds = c.layer_kinds()
    extras_list, body = [], _remat(Block, c)
    if c.scan_layers:
      scanned = nn.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                        in_axes=nn.broadcast, length=c.n_layers)
      x, extras = scanned(c, kinds[0] == "local", block_collect, name="blocks")(x, positions)
    else:
      for i in range(c.n_layers):
        x, e = body(c, kinds[i] == "local", block_collect, name=f"block_{i}")(x, positions)
        extras_list.append(e)
      extras = {k: jnp.stack([e[k] for e in extras_list]) for k in block_collect}
    h = LayerNorm(c, name="ln_f")(x)
    if self.features_only:
      return h, extras
    kind = heads_lib.get(c.head)
    head = kind.module(c)  # created here so that its parameters live under params["head"]
    scores = head(h) if head is not None else kind.scores({"embed": emb}, h, c)  # tied
    if "h" in self.collect:
      extras["h"] = h
    return scores.astype(jnp.float32), extras


def _check_collect(collect: Sequence[str]) -> tuple:
  collect = tuple(collect)
  bad = [k for k in collect if k not in COLLECTABLE]
  if bad:
    raise ValueError(f"unknown intermediates {bad}; allowed: {COLLECTABLE}")
  return collect


@functools.lru_cache(maxsize=64)
def _abstract_params(model_cls, cfg: ModelConfig, seq_len: int, x64: bool):
  """``Model.abstract_params`` (x64 is in the key: dtypes may follow it)."""
  del x64
  return jax.eval_shape(lambda k: model_cls(cfg).init(k, 1, seq_len), jax.random.key(0))


class Model:
  """Functional wrapper: plain-pytree params, pure ``apply``; vmappable over params."""

  def __init__(self, cfg: ModelConfig):
    self.cfg = cfg

  def init(self, rng, batch_size: int = 1, seq_len: int | None = None):
    if self.cfg.vocab_size < 1:
      raise ValueError("model.vocab_size=0 must be resolved from the data before init "
                       "(sbjax.train.resolve_vocab), or set explicitly")
    t = min(seq_len or self.cfg.max_len, self.cfg.max_len)
    tokens = jnp.zeros((batch_size, t), jnp.int32)
    variables = Transformer(self.cfg).init(rng, tokens)
    return jax.tree.map(lambda x: x, dict(variables["params"]))

  def abstract_params(self, seq_len: int = 8):
    """The params' shapes and dtypes (a fresh tree of jax.ShapeDtypeStruct), traced once per
    (model class, config, seq_len): every checkpoint restore asks for them."""
    cached = _abstract_params(type(self), self.cfg, seq_len, jax.config.jax_enable_x64)
    return jax.tree.map(lambda x: x, cached)

  def apply(self, params, tokens_BxT, *, embeds_BxTxD=None):
    """Scores (B×T×V float32: logits, or log-probs for a mos head).

    ``embeds_BxTxD`` replaces the token-embedding lookup (positions are still added)."""
    return self.forward(params, tokens_BxT, (), embeds_BxTxD=embeds_BxTxD)[0]

  def forward(self, params, tokens_BxT, collect: Sequence[str] = (), *, embeds_BxTxD=None):
    """(scores, extras): :meth:`apply`'s scores and a dict of the ``collect`` intermediates
    (empty when nothing is collected): one return type whatever is asked."""
    collect = _check_collect(collect)
    return Transformer(self.cfg, collect).apply({"params": params}, tokens_BxT, embeds_BxTxD)

  def features(self, params, tokens_BxT):
    """Final-norm features h (B×T×D, compute dtype): the forward without the head."""
    return self.trunk(params, tokens_BxT)[0]

  def trunk(self, params, tokens_BxT, collect: Sequence[str] = ()):
    """(h, extras): the forward without the head, with the ``collect`` intermediates
    (``"h"`` among them is h itself) and no B×T×V scores."""
    collect = _check_collect(collect)
    h, extras = Transformer(self.cfg, collect, features_only=True).apply({"params": params},
                                                                         tokens_BxT)
    if "h" in collect:
      extras["h"] = h
    return h, extras

  def head_scores(self, params, h):
    """The head's scores (float32) on final-norm features h: ``apply``'s scores from h."""
    return heads_lib.scores_fn(params, self.cfg)(h).astype(jnp.float32)

  def head_loss_sums(self, params, h_NxD, targets_N):
    """(Σ nll, Σ correct) of the head on features h, float32, ``cfg.loss_chunk`` tokens at a
    time (``sbjax.losses``; > 0 required): the matrix heads through the fused chunked CE,
    mos through the generic chunked scores."""
    fac = heads_lib.matrix_factors(params, h_NxD, self.cfg)
    if fac is not None:
      return losses.chunked_matrix_xent(fac[0], fac[1], targets_N, self.cfg.loss_chunk,
                                        precision=matmul_precision(self.cfg))
    return losses.chunked_scores_xent(heads_lib.scores_fn(params, self.cfg), h_NxD, targets_N,
                                      self.cfg.loss_chunk)

  def loss(self, params, batch_BxT1):
    """Mean next-token cross-entropy (float32) and accuracy on a packed batch of T+1 tokens:
    ``sbjax.losses.next_token_loss`` (chunked when ``cfg.loss_chunk`` > 0)."""
    return losses.next_token_loss(self, params, batch_BxT1)

  def head_matrix(self, params):
    return heads_lib.head_matrix(params, self.cfg)

  def param_count(self, params=None) -> int:
    params = params if params is not None else self.abstract_params()
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def stack_blocks(params, n_layers: int):
  """Unrolled layout (block_0..block_{L-1}) -> scan layout (blocks with a leading L axis)."""
  out = {k: v for k, v in params.items() if not k.startswith("block_")}
  out["blocks"] = jax.tree.map(lambda *xs: jnp.stack(xs),
                               *[params[f"block_{i}"] for i in range(n_layers)])
  return out


def unstack_blocks(params, n_layers: int):
  """Scan layout -> unrolled layout."""
  out = {k: v for k, v in params.items() if k != "blocks"}
  for i in range(n_layers):
    out[f"block_{i}"] = jax.tree.map(lambda x: x[i], params["blocks"])
  return out


def non_embedding_params(cfg: ModelConfig) -> int:
  """Parameters excluding embeddings and head (the N of Kaplan-style scaling fits)."""
  d, f, l = cfg.d_model, cfg.ff_dim, cfg.n_layers
  qkv_bias = 3 * d if cfg.qkv_bias else 0
  per_layer = 4 * d + 3 * d * d + qkv_bias + d * d + d + d * f + f + f * d + d
  return l * per_layer + 2 * d


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
  """Training FLOPs per token: 6·N (matmul params incl. head) + 12·L·T·D attention (fwd+bwd)."""
  d = cfg.d_model
  head = heads_lib.get(cfg.head).flop_params(cfg)  # tied: the embedding's V×d product
  n_mat = cfg.n_layers * (4 * d * d + 2 * d * cfg.ff_dim) + head
  attn = 12 * cfg.n_layers * seq_len * d / 2  # causal: half the score matrix
  return 6.0 * n_mat + attn
