r"""The on-device planted sampler: ``data.options.sampler = "device"``.

Train batch ``s`` of a planted language is drawn on the accelerator, inside the jitted train
step (``sbjax.train.device_batches``), from the language's exact ``P(·|c)``: B independent
chains of T + 1 tokens, each started from the stationary distribution, as the host sampler
(``planted_stream.global_train_batch``) draws them, so the two are equal in distribution
(tests: a chi-square test per context). The tables are device arrays built once; each step
reads nothing from the host.

**Key.** Batch ``s`` uses ``fold_in(fold_in(fold_in(key(planted_seed), DEVICE_TAG),
data_seed), s)`` with the step ``s`` the train state's own counter: the batch is a pure
function of (planted seed, data seed, s), so a resumed run draws the same batches (bitwise
resume), and members with their own data seeds draw their own batches (vmapped over the seeds).

**Inverse CDF, searched from the tail.** Per context ``c`` the probabilities are sorted in
decreasing order (``order[c]``, the token of each sorted position) and stored as the float32
survival function ``S[c, j] = Σ_{i ≥ j} p_sorted[c, i]`` (summed in float64). With a
uniform ``u``, the sampled position is ``J = #{j ≥ 1 : S[c, j] > u}`` (a binary search of
⌈log2 V⌉ gathers), so ``P(J = j) = S[c, j] − S[c, j+1] = p_sorted[c, j]``. The rare tokens
sit at the end, where ``S`` is small and float32 keeps it to a relative 6e-8, and ``u`` is a
uint32 draw times 2⁻³² (exact near 0, steps of 2.3e-10), so a token of probability 1e-8
keeps its probability to about 1% (a cumulative table from the head in float32 would round
every probability below 6e-8 to 0 or 6e-8). The start context is drawn the same way from the
stationary distribution.

**Evaluation** uses the host's fixed validation tokens (``data.options.val_tokens``, drawn
once by the numpy sampler from ``[seed, 2]``): the same tokens as a host-sampler run, so
evaluation losses of the two samplers are comparable.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

DEVICE_TAG = 4  # planted_stream's host batches use 3 in the same seed slot


class Tables(NamedTuple):
  """The sampler's device arrays: the sorted survival tables of the stationary context
  distribution (``start_surv`` [C], ``start_order`` [C]) and of every context's next token
  (``surv`` [C, V] float32, ``order`` [C, V] int32), and the seeds (``data_seed`` a scalar,
  or [N] for members with their own data orders)."""

  start_surv: Any
  start_order: Any
  surv: Any
  order: Any
  planted_seed: Any
  data_seed: Any


def survival_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(S float32 [..., V], order int32 [..., V]): ``order`` sorts each row of ``p`` by
  decreasing probability (ties by token id) and ``S[..., j] = Σ_{i ≥ j} p_sorted[..., i]``,
  summed in float64 from the tail."""
  p = np.asarray(p, np.float64)
  order = np.argsort(-p, axis=-1, kind="stable")
  ps = np.take_along_axis(p, order, -1)
  surv = np.cumsum(ps[..., ::-1], axis=-1)[..., ::-1]
  return surv.astype(np.float32), order.astype(np.int32)


def tables(lang, planted_seed: int, data_seed) -> Tables:
  """The device tables of a planted language (``probs`` [C, V], ``stationary`` [C])."""
  s0, o0 = survival_table(lang.stationary)
  s, o = survival_table(lang.probs)
  return Tables(jnp.asarray(s0), jnp.asarray(o0), jnp.asarray(s), jnp.asarray(o),
                jnp.asarray(planted_seed, jnp.uint32), jnp.asarray(data_seed, jnp.uint32))


def uniform(key, shape) -> jax.Array:
  """float32 uniforms in [0, 1]: a uint32 draw times 2^-32 (exact near 0)."""
  return jax.random.bits(key, shape, jnp.uint32).astype(jnp.float32) * np.float32(2.0 ** -32)


def search(surv_at, size: int, u) -> jax.Array:
  """``#{j in [1, size) : surv_at(j) > u}`` for a non-increasing ``surv_at`` (a binary
  search by powers of two; ``surv_at`` maps an int32 array shaped like ``u`` to values)."""
  n = jnp.zeros(jnp.shape(u), jnp.int32)
  bit = 1 << max(size - 1, 1).bit_length() - 1
  while bit:
    cand = n + bit
    ok = (cand <= size - 1) & (surv_at(jnp.minimum(cand, size - 1)) > u)
    n = jnp.where(ok, cand, n)
    bit >>= 1
  return n


def batch_key(t: Tables, step, data_seed=None):
  """The key of train batch ``step``: pure in (planted seed, data seed, step)."""
  key = jax.random.fold_in(jax.random.key(t.planted_seed), DEVICE_TAG)
  key = jax.random.fold_in(key, t.data_seed if data_seed is None else data_seed)
  return jax.random.fold_in(key, jnp.asarray(step, jnp.uint32))


def sample_chains(t: Tables, key, n_seqs: int, length: int, context: int) -> jax.Array:
  """int32 [n_seqs, length]: independent chains started from the stationary distribution
  (the first ``context`` tokens are the starting context), as ``_MarkovLanguage.sample``."""
  n_ctx, vocab = t.surv.shape
  k0, k1 = jax.random.split(key)
  pos = search(lambda j: t.start_surv[j], n_ctx, uniform(k0, (n_seqs,)))
  c = t.start_order[pos]
  powers = jnp.asarray([vocab ** (context - 1 - i) for i in range(context)], jnp.int32)
  first = (c[:, None] // powers) % vocab

  def body(c, u):
    j = search(lambda j: t.surv[c, j], vocab, u)
    w = t.order[c, j]
    return (c * vocab + w) % n_ctx, w

  _, rest = jax.lax.scan(body, c, uniform(k1, (max(length - context, 0), n_seqs)))
  return jnp.concatenate([first, rest.T], axis=1)[:, :length].astype(jnp.int32)


def train_batch(t: Tables, step, batch: int, seq_len: int, context: int) -> jax.Array:
  """Global train batch ``step``: int32 [batch, seq_len + 1], or [N, batch, seq_len + 1]
  when ``t.data_seed`` holds N members' seeds (jittable; ``step`` may be traced)."""
  def one(seed):
    return sample_chains(t, batch_key(t, step, seed), batch, seq_len + 1, context)

  seeds = t.data_seed
  return one(seeds) if jnp.ndim(seeds) == 0 else jax.vmap(one)(seeds)
