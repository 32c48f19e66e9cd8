"""Next-token cross-entropy, plain and token-chunked (the V-sized logits never all exist).

For N = B·T tokens with features x_n (N×K) and a head matrix W (V×K), logits are
z_n = W x_n and

    nll_n = logsumexp_v z_nv − z_n,y_n,      loss = (1/N) Σ_n nll_n.

``xent_from_scores`` is the reference: it takes the full N×V scores (logits, or
normalised log-probs for a mixture-of-softmaxes head; log_softmax is the identity on
those) and is what ``Model.loss`` uses with ``model.loss_chunk=0``.

``chunked_matrix_xent(x, w, y, chunk)`` never forms more than ``chunk``×V logits. Its
custom VJP is *fused*: while the forward pass holds a chunk's logits it also forms

    ∂nll_sum/∂z = softmax(z) − onehot(y)          (chunk×V, then dropped)
    ∂/∂x_c = (softmax(z_c) − onehot(y_c)) W        (chunk×K, kept)
    ∂/∂W  += (softmax(z_c) − onehot(y_c))ᵀ x_c     (V×K, accumulated in float32)

so the backward pass only scales these by the incoming cotangent: three matmuls of
N·V·K like the unchunked loss (no recomputation), and O(chunk·V + V·K + N·K) memory
instead of O(N·V). Called without differentiation (evaluation) it runs only the
forward loop. Dense and tied heads use x = h, W = the head or embedding matrix; a
low-rank head W = A·B uses x = h·Bᵀ (N×r, computed once) and A (V×r), so the V×d
product is never formed either, and the gradient flows into B through x.

``chunked_scores_xent(score_fn, x, y, chunk)`` is the generic version for any head
(e.g. mos): a scan over token chunks whose body is ``jax.checkpoint``-ed, so the
backward pass recomputes one chunk's scores at a time (one extra forward of the head).

Scores and losses are float32 whatever the compute dtype; the head matmuls run in the
dtype of ``x`` like the unchunked model.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def xent_from_scores(scores_NxV, targets_N):
  """(Σ nll, Σ correct) from full scores (logits or log-probs), float32."""
  logp = jax.nn.log_softmax(scores_NxV.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(logp, targets_N[..., None], axis=-1)[..., 0]
  correct = (jnp.argmax(logp, -1) == targets_N).astype(jnp.float32)
  return nll.sum(), correct.sum()


def _check_chunk(chunk) -> int:
  if not isinstance(chunk, int) or chunk < 1:
    raise ValueError(f"loss chunk must be an integer >= 1 (tokens per chunk), got {chunk!r}")
  return chunk


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


def _chunk_logits(x_c, w):
  return jnp.einsum("nk,vk->nv", x_c, w.astype(x_c.dtype)).astype(jnp.float32)


def _chunk_stats(logits, t_c, valid_c):
  """(lse, Σ nll, Σ correct) of a chunk×V block (the training path and generic scores)."""
  lse = jax.nn.logsumexp(logits, axis=-1)
  tgt = jnp.take_along_axis(logits, t_c[:, None], axis=-1)[:, 0]
  nll = jnp.where(valid_c, lse - tgt, 0.0)
  correct = jnp.where(valid_c, jnp.argmax(logits, -1) == t_c, False).astype(jnp.float32)
  return lse, nll.sum(), correct.sum()


def _eval_chunk_stats(x_c, w, t_c, valid_c):
  """(Σ nll, Σ correct) of one chunk for evaluation, from its logits *transposed* (V×chunk).

  With V down the columns every reduction over V is a column reduction, which XLA:CPU
  vectorises across the chunk (a 1024×50304 logsumexp: 0.035 s this way, 0.20 s over rows).
  "correct" is ``argmax == target`` with argmax's rule for ties (the first maximum), found
  without compares (which XLA:CPU does not vectorise): sign(z − max) + 1 is exactly 1 at the
  maxima and 0 elsewhere, so V − max_v[(sign(z_v − max) + 1)·(V − v)] is the first
  maximum's index (exact in float32 for V < 2^24). Evaluation only: inside the training
  step this layout measured slower (BUILD_NOTES.md, issue 8).
  """
  z = jnp.einsum("vk,nk->vn", w.astype(x_c.dtype), x_c).astype(jnp.float32)
  v, c = z.shape
  m = jnp.max(z, axis=0)
  d = z - m[None, :]
  lse = m + jnp.log(jnp.sum(jnp.exp(d), axis=0))
  tgt = z[t_c, jnp.arange(c)]
  rev = (v - jnp.arange(v, dtype=jnp.float32))[:, None]
  first = v - jnp.max((jnp.sign(d) + 1.0) * rev, axis=0)
  nll = jnp.where(valid_c, lse - tgt, 0.0)
  correct = jnp.where(valid_c, first == t_c.astype(jnp.float32), False).astype(jnp.float32)
  return nll.sum(), correct.sum()


def _forward(x, w, targets, chunk):
  xs, ts, vs, _ = _pad_chunks(x, targets, chunk)

  def body(carry, inp):
    nll, cor = _eval_chunk_stats(inp[0], w, inp[1], inp[2])
    return (carry[0] + nll, carry[1] + cor), None

  (nll, cor), _ = jax.lax.scan(body, (jnp.float32(0), jnp.float32(0)), (xs, ts, vs))
  return nll, cor


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _matrix_xent(x, w, targets, chunk):
  return _forward(x, w, targets, chunk)


def _matrix_xent_fwd(x, w, targets, chunk):
  n = targets.shape[0]
  xs, ts, vs, pad = _pad_chunks(x, targets, chunk)
  v = w.shape[0]

  def body(carry, inp):
    nll_acc, cor_acc, dw_acc = carry
    x_c, t_c, v_c = inp
    logits = _chunk_logits(x_c, w)
    lse, nll, cor = _chunk_stats(logits, t_c, v_c)
    onehot = jnp.arange(v)[None, :] == t_c[:, None]
    dz = jnp.where(v_c[:, None], jnp.exp(logits - lse[:, None]) - onehot, 0.0)  # chunk×V
    dz = dz.astype(x_c.dtype)
    dx_c = jnp.einsum("nv,vk->nk", dz, w.astype(x_c.dtype))
    dw_acc = dw_acc + jnp.einsum("nv,nk->vk", dz, x_c, preferred_element_type=jnp.float32)
    return (nll_acc + nll, cor_acc + cor, dw_acc), dx_c

  init = (jnp.float32(0), jnp.float32(0), jnp.zeros(w.shape, jnp.float32))
  (nll, cor, dw), dxs = jax.lax.scan(body, init, (xs, ts, vs))
  dx = dxs.reshape(-1, x.shape[-1])[:n]
  return (nll, cor), (dx.astype(x.dtype), dw.astype(w.dtype))


def _matrix_xent_bwd(chunk, res, g):
  dx, dw = res
  g_nll = g[0]  # the correct count is piecewise constant: zero gradient
  return (g_nll * dx).astype(dx.dtype), (g_nll * dw).astype(dw.dtype), None


_matrix_xent.defvjp(_matrix_xent_fwd, _matrix_xent_bwd)


def chunked_matrix_xent(x_NxK, w_VxK, targets_N, chunk: int):
  """(Σ nll, Σ correct) for logits x·Wᵀ, ``chunk`` tokens at a time (fused custom VJP)."""
  chunk = _check_chunk(chunk)
  if x_NxK.ndim != 2 or w_VxK.ndim != 2 or x_NxK.shape[1] != w_VxK.shape[1]:
    raise ValueError(f"chunked_matrix_xent wants x N×K and W V×K, got {x_NxK.shape} and "
                     f"{w_VxK.shape}")
  return _matrix_xent(x_NxK, w_VxK, targets_N.astype(jnp.int32), min(chunk, targets_N.shape[0]))


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
