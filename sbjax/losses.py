"""Next-token cross-entropy, plain and token-chunked (the V-sized logits never all exist).

For N = B·T tokens with features x_n (N×K) and a head matrix W (V×K), logits are z_n = W x_n
and nll_n = logsumexp_v z_nv − z_n,y_n, loss = (1/N) Σ_n nll_n.

``chunked_matrix_xent(x, w, y, chunk)`` never forms more than ``chunk``×V logits. Its custom
VJP is *fused*: while the forward pass holds a chunk's logits it also forms

    ∂/∂x_c = (softmax(z_c) − onehot(y_c)) W        (chunk×K, kept)
    ∂/∂W  += (softmax(z_c) − onehot(y_c))ᵀ x_c     (V×K, accumulated in float32)

so the backward pass only scales these by the incoming cotangent (no recomputation), in
O(chunk·V + V·K + N·K) memory. A low-rank head W = A·B uses x = h·Bᵀ and A, so the V×d product
is never formed either. Evaluation (no differentiation) sweeps each chunk's vocabulary in
tiles of ``v_tile`` rows (``v_tile_for``: about 2^20 logits), transposed (v_tile × chunk) so
that every reduction over V is a column reduction; the fused gradient takes ``TRAIN_CHUNK``
tokens at a time, untiled, in the same column layout. ``chunked_scores_xent(score_fn, x, y,
chunk)`` is the generic version for any head (e.g. mos), its chunks ``jax.checkpoint``-ed.

The training losses (``sbjax.train.build.objective_loss`` picks one by ``train.objective``):
``next_token_loss``, mean −log q_t(x_{t+1}) (``Model.loss``), and ``expected_loss``, its
Rao-Blackwellised form on a planted language whose exact next-token table P(·|c) is known:

    L_RB = mean_{t : c_t defined}  Σ_w P(w | c_t) (−log q_t(w)),

c_t = the last ``planted_context`` tokens up to t. Both losses and their gradients have the
same expectation (tower property), each RB term without target-sampling noise; L_RB minus the
batch's mean entropy H(P(·|c_t)) is the mean KL(P ‖ q) ≥ 0. The table (C×V float32) is a
constant of the jitted step; ``acc`` stays the accuracy on the sampled targets.

Scores and losses are float32 whatever the compute dtype; the head matmuls run in the dtype of
``x`` at ``precision`` (``sbjax.precision``; a direct call's default "auto" is HIGHEST for
float32 operands).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from sbjax.precision import for_dtype


def _check_count(value, what: str, unit: str) -> int:
  if not isinstance(value, int) or value < 1:
    raise ValueError(f"{what} must be an integer >= 1 ({unit}), got {value!r}")
  return value


def _check_chunk(chunk) -> int:
  return _check_count(chunk, "loss chunk", "tokens per chunk")


def _pad_chunks(x_NxK, targets_N, chunk: int):
  """Reshape to (n_chunks, chunk, ...) with zero padding; also a validity mask."""
  n = targets_N.shape[0]
  n_chunks = -(-n // chunk)
  pad = n_chunks * chunk - n
  valid = jnp.arange(n_chunks * chunk) < n
  if pad:
    x_NxK = jnp.concatenate([x_NxK, jnp.zeros((pad,) + x_NxK.shape[1:], x_NxK.dtype)])
    targets_N = jnp.concatenate([targets_N, jnp.zeros((pad,), targets_N.dtype)])
  return (x_NxK.reshape(n_chunks, chunk, *x_NxK.shape[1:]),
          targets_N.reshape(n_chunks, chunk), valid.reshape(n_chunks, chunk), pad)


def _chunk_sums(lse, tgt, first, t_c, valid_c):
  """(Σ nll, Σ correct) over the valid tokens of a chunk, from each token's logsumexp,
  target logit and first argmax."""
  nll = jnp.where(valid_c, lse - tgt, 0.0)
  correct = jnp.where(valid_c, first == t_c, False).astype(jnp.float32)
  return nll.sum(), correct.sum()


def _chunk_stats(logits, t_c, valid_c):
  """(lse, Σ nll, Σ correct) of a chunk×V block (row layout: training and generic scores)."""
  lse = jax.nn.logsumexp(logits, axis=-1)
  tgt = jnp.take_along_axis(logits, t_c[:, None], axis=-1)[:, 0]
  return (lse, *_chunk_sums(lse, tgt, jnp.argmax(logits, -1), t_c, valid_c))


TILE_ELEMS = 1 << 20  # logits per V tile (4 MB in float32): stays in cache between its passes


def v_tile_for(v: int, chunk: int, tile_elems: int = TILE_ELEMS) -> int:
  """Vocabulary rows per tile for ``chunk`` tokens: all of V when it fits ``tile_elems``,
  else the largest divisor of V in (target/2, target] (no padding), else target (the
  last tile is padded with rows masked to −inf)."""
  target = max(64, tile_elems // max(chunk, 1))
  if v <= target:
    return v
  for d in range(target, target // 2, -1):
    if v % d == 0:
      return d
  return target


def _tiles(w, vb: int, dtype):
  """W (V×K) as nb×vb×K tiles in the compute dtype, and an nb×vb additive mask (0 / −inf)
  for the padded rows of the last tile (None when vb divides V)."""
  v, k = w.shape
  nb = -(-v // vb)
  w = w.astype(dtype)
  if nb * vb == v:
    return w.reshape(nb, vb, k), None
  w = jnp.concatenate([w, jnp.zeros((nb * vb - v, k), dtype)])
  bias = jnp.where(jnp.arange(nb * vb) < v, 0.0, -jnp.inf).astype(jnp.float32)
  return w.reshape(nb, vb, k), bias.reshape(nb, vb)


def _tile_logits(wt, bias, j, x_c, precision):
  """Tile j's logits, transposed: vb×chunk, float32 (padded rows −inf)."""
  z = jnp.einsum("vk,nk->vn", wt[j], x_c, precision=precision).astype(jnp.float32)
  return z if bias is None else z + bias[j][:, None]


def _pass1(x_c, wt, bias, t_c, precision=None):
  """One sweep over the V tiles of a token chunk: (lse, target logit, first argmax).

  Online logsumexp: m ← max(m, max_v z), s ← s·e^{m_old−m} + Σ_v e^{z_v−m}. Within a tile the
  first maximum without compares: vb − max_v[(sign(z_v − max) + 1)·(vb − v)] (exact in float32
  for vb < 2^24); across tiles only a strictly larger maximum replaces it (ties keep the first)."""
  nb, vb, _ = wt.shape
  c = x_c.shape[0]
  cols = jnp.arange(c)
  rev = (vb - jnp.arange(vb, dtype=jnp.float32))[:, None]

  def body(carry, j):
    m, s, tgt, best = carry
    z = _tile_logits(wt, bias, j, x_c, precision)
    zm = jnp.max(z, axis=0)
    m_new = jnp.maximum(m, zm)
    s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(z - m_new[None, :]), axis=0)
    local = t_c - j * vb
    here = (local >= 0) & (local < vb)
    tgt = jnp.where(here, z[jnp.clip(local, 0, vb - 1), cols], tgt)
    first = (j * vb + vb).astype(jnp.float32) - jnp.max((jnp.sign(z - zm[None, :]) + 1.0) * rev,
                                                          axis=0)
    best = jnp.where(zm > m, first, best)  # strictly larger: ties keep the earlier tile
    return (m_new, s, tgt, best), None

  neg = jnp.full((c,), -jnp.inf, jnp.float32)
  zero = jnp.zeros((c,), jnp.float32)
  (m, s, tgt, first), _ = jax.lax.scan(body, (neg, zero, zero, zero), jnp.arange(nb))
  return m + jnp.log(s), tgt, first


def _forward(x, w, targets, chunk, vb, precision):
  xs, ts, vs, _ = _pad_chunks(x, targets, chunk)
  wt, bias = _tiles(w, vb, x.dtype)

  def body(carry, inp):
    x_c, t_c, v_c = inp
    lse, tgt, first = _pass1(x_c, wt, bias, t_c, precision)
    nll, cor = _chunk_sums(lse, tgt, first, t_c.astype(jnp.float32), v_c)  # float index
    return (carry[0] + nll, carry[1] + cor), None

  (nll, cor), _ = jax.lax.scan(body, (jnp.float32(0), jnp.float32(0)), (xs, ts, vs))
  return nll, cor


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _matrix_xent(x, w, targets, chunk, vb, precision):
  return _forward(x, w, targets, chunk, vb, precision)


TRAIN_CHUNK = 512  # tokens per sweep of the fused gradient (at most loss_chunk)


def _softmax_cols(z, v):
  """Column statistics of transposed logits z (V×c, float32): (lse, first argmax) per
  column, the argmax compare-free as in ``_pass1``."""
  m = jnp.max(z, axis=0)
  lse = m + jnp.log(jnp.sum(jnp.exp(z - m[None, :]), axis=0))
  rev = (v - jnp.arange(v, dtype=jnp.float32))[:, None]
  first = v - jnp.max((jnp.sign(z - m[None, :]) + 1.0) * rev, axis=0)
  return lse, first


def _matrix_xent_fwd(x, w, targets, chunk, vb, precision):
  """The fused forward + gradient, ``min(chunk, TRAIN_CHUNK)`` tokens at a time: each sweep
  forms z = W·x_cᵀ (V×c) and p = exp(z − lse), then ∂x_cᵀ = Wᵀ·p and ∂W += p·x_c; the one-hot
  part of ∂z = p − onehot(y) is applied once outside the sweep (∂x −= W[y], ∂W[y] −= x).
  Padded tokens have x = 0: they add nothing to ∂W, and their ∂x rows are dropped."""
  del vb
  n, k = x.shape
  xs, ts, vs, _ = _pad_chunks(x, targets, min(chunk, TRAIN_CHUNK))
  v = w.shape[0]
  wc = w.astype(x.dtype)

  def body(carry, inp):
    nll_acc, cor_acc, dw_acc = carry
    x_c, t_c, v_c = inp
    z = jnp.einsum("vk,nk->vn", wc, x_c, precision=precision).astype(jnp.float32)  # V×c
    lse, first = _softmax_cols(z, v)
    tgt = z[t_c, jnp.arange(x_c.shape[0])]
    nll, cor = _chunk_sums(lse, tgt, first, t_c.astype(jnp.float32), v_c)  # float index
    p = jnp.exp(z - lse[None, :]).astype(x_c.dtype)  # softmax, V×c
    dxt_c = jnp.einsum("vk,vn->kn", wc, p, precision=precision)
    dw_acc = dw_acc + jnp.einsum("vn,nk->vk", p, x_c, precision=precision,
                                 preferred_element_type=jnp.float32)
    return (nll_acc + nll, cor_acc + cor, dw_acc), dxt_c

  init = (jnp.float32(0), jnp.float32(0), jnp.zeros(w.shape, jnp.float32))
  (nll, cor, dw), dxts = jax.lax.scan(body, init, (xs, ts, vs))
  dx = jnp.swapaxes(dxts, 1, 2).reshape(-1, k)[:n] - wc[targets]
  dw = dw.at[targets].add(-x.astype(jnp.float32))
  return (nll, cor), (dx.astype(x.dtype), dw.astype(w.dtype))


def _matrix_xent_bwd(chunk, vb, precision, res, g):
  dx, dw = res
  g_nll = g[0]  # the correct count is piecewise constant: zero gradient
  return (g_nll * dx).astype(dx.dtype), (g_nll * dw).astype(dw.dtype), None


_matrix_xent.defvjp(_matrix_xent_fwd, _matrix_xent_bwd)


def chunked_matrix_xent(x_NxK, w_VxK, targets_N, chunk: int, v_tile: int | None = None,
                        precision="auto"):
  """(Σ nll, Σ correct) for logits x·Wᵀ, ``chunk`` tokens at a time, with a fused custom
  VJP; evaluation also sweeps V ``v_tile`` rows at a time (default ``v_tile_for(V, chunk)``).
  ``precision``: a ``jax.lax.Precision`` for every head matmul; None: the backend default;
  "auto": ``sbjax.precision.for_dtype`` of x (HIGHEST for float32, so float32 is float32 on
  GPU and TPU too)."""
  chunk = _check_chunk(chunk)
  if isinstance(precision, str) and precision == "auto":
    precision = for_dtype(x_NxK.dtype)
  if x_NxK.ndim != 2 or w_VxK.ndim != 2 or x_NxK.shape[1] != w_VxK.shape[1]:
    raise ValueError(f"chunked_matrix_xent wants x N×K and W V×K, got {x_NxK.shape} and "
                     f"{w_VxK.shape}")
  chunk = min(chunk, targets_N.shape[0])
  v = w_VxK.shape[0]
  if v_tile is None:
    v_tile = v_tile_for(v, chunk)
  v_tile = _check_count(v_tile, "v_tile", "vocabulary rows per tile")
  return _matrix_xent(x_NxK, w_VxK, targets_N.astype(jnp.int32), chunk, min(v_tile, v),
                      precision)


def chunked_scores_xent(score_fn, x_NxK, targets_N, chunk: int):
  """(Σ nll, Σ correct) for scores ``score_fn(x_chunk)`` (any head; parameters may be
  closed over), ``chunk`` tokens at a time; the backward pass recomputes each chunk."""
  chunk = _check_chunk(chunk)
  xs, ts, vs, _ = _pad_chunks(x_NxK, targets_N.astype(jnp.int32),
                              min(chunk, targets_N.shape[0]))

  @jax.checkpoint
  def one(x_c, t_c, v_c):
    _, nll, cor = _chunk_stats(score_fn(x_c).astype(jnp.float32), t_c, v_c)
    return nll, cor

  def body(carry, inp):
    nll, cor = one(*inp)
    return (carry[0] + nll, carry[1] + cor), None

  (nll, cor), _ = jax.lax.scan(body, (jnp.float32(0), jnp.float32(0)), (xs, ts, vs))
  return nll, cor


def next_token_loss(model, params, batch_BxT1):
  """Mean next-token cross-entropy (float32) and accuracy on a packed batch of T+1 tokens
  (``train.objective=sampled``; ``Model.loss``).

  With ``model.cfg.loss_chunk`` > 0 the logits are formed ``loss_chunk`` tokens at a time
  (:func:`chunked_matrix_xent`): same loss and gradients, O(chunk·V) instead of O(B·T·V)
  memory."""
  inputs, targets = batch_BxT1[:, :-1], batch_BxT1[:, 1:]
  if model.cfg.loss_chunk:
    return features_loss(model, params, model.features(params, inputs), targets)
  return _scores_loss(model.apply(params, inputs), targets)


def features_loss(model, params, h_BxTxD, targets_BxT):
  """``next_token_loss`` from the final-norm features h = ``model.features(params, inputs)``:
  the head's part of the loss, the same operations. A frozen trunk's h is computed once for
  the many heads of a population (``sbjax.train.population.make_shared_trunk_step``)."""
  if model.cfg.loss_chunk:
    y = targets_BxT.reshape(-1)
    nll, cor = model.head_loss_sums(params, h_BxTxD.reshape(-1, h_BxTxD.shape[-1]), y)
    n = y.shape[0]
    return nll / n, {"loss": nll / n, "acc": cor / n}
  return _scores_loss(model.head_scores(params, h_BxTxD), targets_BxT)


def _scores_loss(scores_BxTxV, targets_BxT):
  logp = jax.nn.log_softmax(scores_BxTxV, axis=-1)
  nll = -jnp.take_along_axis(logp, targets_BxT[..., None], axis=-1)[..., 0]
  acc = (jnp.argmax(logp, -1) == targets_BxT).astype(jnp.float32)
  return nll.mean(), {"loss": nll.mean(), "acc": acc.mean()}


def context_ids(inputs_BxT, n: int, vocab: int):
  """int32 [B, T]: the index of the last n tokens up to t (sbjax.data.planted's order, most
  recent token last), −1 where fewer than n tokens are visible. int32 holds every context of
  a planted language (its table is capped at sbjax.data.planted.MAX_TABLE = 2^26 entries).
  Jittable; also the planted experiment's measurement (on numpy windows)."""
  B, T = inputs_BxT.shape
  if n > T:
    return jnp.full((B, T), -1, jnp.int32)
  acc = jnp.zeros((B, T - n + 1), jnp.int32)
  for i in range(n):
    acc = acc * vocab + inputs_BxT[:, i:T - n + 1 + i].astype(jnp.int32)
  return jnp.concatenate([jnp.full((B, n - 1), -1, jnp.int32), acc], axis=1)


def expected_loss(model, probs_CxV, context: int):
  """(params, batch [B, T+1]) -> (L_RB, {"loss", "acc"}): the Rao-Blackwellised loss of the
  module doc, for the exact next-token table ``probs_CxV`` of a planted language."""
  probs = jnp.asarray(probs_CxV, jnp.float32)
  vocab = probs.shape[1]

  def loss(params, batch_BxT1):
    inputs, targets = batch_BxT1[:, :-1], batch_BxT1[:, 1:]
    logq_BxTxV = jax.nn.log_softmax(model.apply(params, inputs).astype(jnp.float32), axis=-1)
    c_BxT = context_ids(inputs, context, vocab)
    ok = (c_BxT >= 0).astype(jnp.float32)
    p_BxTxV = probs[jnp.maximum(c_BxT, 0)]
    ce_BxT = -jnp.sum(p_BxTxV * logq_BxTxV, axis=-1)
    value = jnp.sum(ce_BxT * ok) / jnp.maximum(jnp.sum(ok), 1.0)
    acc = (jnp.argmax(logq_BxTxV, -1) == targets).astype(jnp.float32).mean()
    return value, {"loss": value, "acc": acc}

  return loss
