r"""The on-device planted sampler: ``data.options.sampler = "device"``.

Train batch ``s`` of a planted language is drawn inside the jitted train step
(``sbjax.train.device_batches``) from the language's exact ``P(·|c)``: B independent chains of
T + 1 tokens, each started from the stationary distribution, equal in distribution to the
host sampler's (``sbjax.data.dataset.StreamingPlanted``). The tables are put on the devices
once; each step reads nothing from the host.

**Key.** Batch ``s`` uses ``fold_in(fold_in(fold_in(key(planted_seed), DEVICE_TAG),
data_seed), s)`` with ``s`` the train state's own step: pure in (planted seed, data seed, s),
so a resumed run draws the same batches, and members with their own data seeds draw their own.

**Inverse CDF, searched from the tail.** Per context ``c`` the probabilities are sorted in
decreasing order (``order[c]``) and stored as the float32 survival function
``S[c, j] = Σ_{i ≥ j} p_sorted[c, i]`` (summed in float64). With a uniform ``u`` (a uint32
draw times 2⁻³²), the sampled position is ``J = #{j ≥ 1 : S[c, j] > u}`` (``search``), so
``P(J = j) = p_sorted[c, j]``. The rare tokens sit at the end, where float32 keeps ``S`` to a
relative 6e-8: a token of probability 1e-8 keeps its probability to about 1% (a float32
cumulative table from the head would round every probability below 6e-8 to 0 or 6e-8).
Evaluation uses the host's validation tokens, as a host-sampler run does.
"""


from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

DEVICE_TAG = 4  # the host's streamed batches use 3 in the same seed slot


class Tables(NamedTuple):
  """The sampler's device arrays: the blocked survival tables (``blocked``) of the stationary
  context distribution (``start_*``, one row) and of every context's next token (``surv``
  [C, nb, b] float32, its block starts ``coarse`` [C, nb], ``order`` [C, V] int32 the token
  of each sorted position), and the seeds (``data_seed`` a scalar, or [N] for members with
  their own data orders)."""

  start_surv: Any
  start_coarse: Any
  start_order: Any
  surv: Any
  coarse: Any
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


def blocked(surv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(blocks [R, nb, b], coarse [R, nb]) of survival rows [R, V]: ``b`` = 2^⌈log2(V)/2⌉,
  rows padded with −1 (never above a uniform) to nb·b, ``coarse`` = each block's first value."""
  rows, size = surv.shape
  b = 1 << -(-max(size - 1, 1).bit_length() // 2)
  nb = -(-size // b)
  pad = np.full((rows, nb * b), -1.0, np.float32)
  pad[:, :size] = surv
  blocks = pad.reshape(rows, nb, b)
  return blocks, np.ascontiguousarray(blocks[:, :, 0])


def tables(lang, planted_seed: int, data_seed) -> Tables:
  """The sampler's tables of a planted language (``probs`` [C, V], ``stationary`` [C]), as
  numpy arrays: the caller puts them on its devices once (``jax.device_put``)."""
  s0, o0 = survival_table(lang.stationary[None])
  s, o = survival_table(lang.probs)
  return Tables(*blocked(s0), o0, *blocked(s), o, np.asarray(planted_seed, np.uint32),
                np.asarray(data_seed, np.uint32))


def uniform(key, shape) -> jax.Array:
  """float32 uniforms in [0, 1]: a uint32 draw times 2^-32 (exact near 0)."""
  return jax.random.bits(key, shape, jnp.uint32).astype(jnp.float32) * np.float32(2.0 ** -32)


def search(blocks, coarse, rows, u) -> jax.Array:
  """``#{j ≥ 1 : S[rows, j] > u}`` for non-increasing survival rows in ``blocked`` form: the
  blocks whose first value is above u (the first block aside), then the positions after the
  first in the last such block; two gathers of ⌈√V⌉ values per draw."""
  b = blocks.shape[-1]
  m = jnp.sum(coarse[rows, 1:] > u[:, None], axis=-1, dtype=jnp.int32)
  fine = jnp.sum(blocks[rows, m, 1:] > u[:, None], axis=-1, dtype=jnp.int32)
  return m * b + fine


def batch_key(t: Tables, step, data_seed=None):
  """The key of train batch ``step``: pure in (planted seed, data seed, step)."""
  key = jax.random.fold_in(jax.random.key(t.planted_seed), DEVICE_TAG)
  key = jax.random.fold_in(key, t.data_seed if data_seed is None else data_seed)
  return jax.random.fold_in(key, jnp.asarray(step, jnp.uint32))


def sample_chains(t: Tables, key, n_seqs: int, length: int, context: int) -> jax.Array:
  """int32 [n_seqs, length]: independent chains started from the stationary distribution
  (the first ``context`` tokens are the starting context), as ``_MarkovLanguage.sample``."""
  t = jax.tree.map(jnp.asarray, t)  # numpy tables (a closure) or device arrays alike
  n_ctx, vocab = t.order.shape
  k0, k1 = jax.random.split(key)
  zeros = jnp.zeros((n_seqs,), jnp.int32)
  c = t.start_order[0, search(t.start_surv, t.start_coarse, zeros, uniform(k0, (n_seqs,)))]
  powers = jnp.asarray([vocab ** (context - 1 - i) for i in range(context)], jnp.int32)
  first = (c[:, None] // powers) % vocab

  def body(c, u):
    w = t.order[c, search(t.surv, t.coarse, c, u)]
    return (c * vocab + w) % n_ctx, w

  _, rest = jax.lax.scan(body, c, uniform(k1, (max(length - context, 0), n_seqs)), unroll=4)
  return jnp.concatenate([first, rest.T], axis=1)[:, :length].astype(jnp.int32)


def train_batch(t: Tables, step, batch: int, seq_len: int, context: int) -> jax.Array:
  """Global train batch ``step``: int32 [batch, seq_len + 1], or [N, batch, seq_len + 1]
  when ``t.data_seed`` holds N members' seeds (jittable; ``step`` may be traced)."""
  def one(seed):
    return sample_chains(t, batch_key(t, step, seed), batch, seq_len + 1, context)

  seeds = t.data_seed
  return one(seeds) if jnp.ndim(seeds) == 0 else jax.vmap(one)(seeds)
