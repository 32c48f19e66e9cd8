"""Groups of same-shape models trained in one vmapped program, and their collapse pass.

Used by ``experiments/collapse.py`` (Wu & Papyan 2024). Two pieces:

``train_group(mc, tc, members, datasets, snapshot_steps)``
  Trains M members of one architecture ``mc`` together: the step is
  ``sbjax.train.make_train_step`` vmapped over a leading member axis (as
  ``sbjax.population`` does), but every member has its OWN batch (its own data-order
  seed: batch i of member m is ``datasets[m].train_batch(i)``, a pure function of
  (data_seed_m, i)), its own init seed and its own decoupled weight decay λ_m:

      u = -lr(t) · (Adam(g) + λ_m · p)   (on matrices only; ``sbjax.optim.decay_mask``)

  which is ``optax.adamw`` written as its chain (clip → scale_by_adam →
  add_decayed_weights(λ_m) → scale_by_learning_rate), so λ_m can be a traced per-member
  value. (``sbjax.population`` shares the batch and scales only the learning rate, so it
  cannot express data-order seeds or per-member weight decay.) Returns host copies of the
  stacked parameters at each step of ``snapshot_steps``: with a constant learning rate
  after warm-up (``train.min_lr_ratio=1``) the snapshot at step S equals a run trained for
  exactly S steps, so one 3-epoch run also gives the 1-epoch model.

``collapse_pass(mc, stacked_params, train_windows, val_windows, ...)``
  The authors' three streaming passes for every member at once (features h = the
  final-norm output, the head input; labels = next tokens):

  1. train split: per-class sums and counts (``mean_update``) -> μ_c = sum_c / N_c;
  2. train split: per-class Σ‖h_i − μ_c‖² (``var_update``) -> σ_c² (two-pass variance);
  3. validation: NC4 hits (``nc4_update``, search set per ``nc4_search``) and the
     validation loss −(1/N_val) Σ log softmax(z_i)[y_i].

  Pass 2 re-uses the features of pass 1 when they fit in ``feature_cache_bytes`` (host
  memory), otherwise it recomputes the forward, so memory is O(M·V·d) whatever the
  number of tokens. Then ``sbjax.metrics.collapse.metrics_from_stats`` per member
  (blocked pairs, never K×K) gives every key of ``collapse_metrics`` plus the per-class
  CDNV and interference (``per_class=True``) for the token-level view.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sbjax import heads as heads_lib
from sbjax import train as train_lib
from sbjax.config import ModelConfig, TrainConfig
from sbjax.metrics import collapse as C
from sbjax.model import Model
from sbjax.optim import decay_mask, lr_schedule

log = logging.getLogger("sbjax")


@dataclasses.dataclass(frozen=True)
class Member:
  """One model of a group: init seed, data-order seed, decoupled weight decay."""

  seed: int = 0
  data_seed: int = 0
  weight_decay: float = 0.0


def member_tx(tc: TrainConfig, weight_decay) -> optax.GradientTransformation:
  """``sbjax.optim.make_optimizer`` (no frozen trunk) with a possibly traced weight decay."""
  return optax.chain(
      optax.clip_by_global_norm(tc.clip),
      optax.scale_by_adam(b1=tc.b1, b2=tc.b2, eps=tc.eps),
      optax.add_decayed_weights(weight_decay, mask=decay_mask),
      optax.scale_by_learning_rate(lr_schedule(tc)),
  )


@functools.lru_cache(maxsize=16)
def _group_fns(mc: ModelConfig, tc: TrainConfig):
  """Jitted (init, optimizer init, vmapped step) of one architecture and schedule, shared
  by every group with the same configs (compiled once per member count)."""
  model = Model(mc)

  def member_step(params, opt_state, batch, step_idx, wd):
    step = train_lib.make_train_step(model, member_tx(tc, wd), 1, False)
    return step(params, opt_state, batch, step_idx)

  step_fn = jax.jit(jax.vmap(member_step, in_axes=(0, 0, 0, None, 0)), donate_argnums=(0, 1))
  init_fn = jax.jit(jax.vmap(lambda k: model.init(k, 1, tc.seq_len)))
  opt_init = jax.jit(jax.vmap(member_tx(tc, 0.0).init))
  return init_fn, opt_init, step_fn


def train_group(mc: ModelConfig, tc: TrainConfig, members: Sequence[Member], datasets,
                snapshot_steps: Sequence[int], *, log_every: int = 0, name: str = "group"):
  """Train the members together for ``max(snapshot_steps)`` steps (see the module doc).

  ``datasets[m]`` gives member m's batches (``train_batch(i)``: B×(T+1) int32).
  Returns ``(snapshots, info)``: ``snapshots[S]`` = host numpy stacked params (leading
  axis M) at step S; ``info`` = {"train_loss": (M,) mean loss of the last ≤100 steps,
  "seconds", "steps", "tokens_per_member"}.
  """
  m = len(members)
  if m < 1 or len(datasets) != m:
    raise ValueError(f"train_group needs one dataset per member; got {m} members and "
                     f"{len(datasets)} datasets")
  steps = int(max(snapshot_steps))
  if min(snapshot_steps) < 1:
    raise ValueError(f"snapshot steps must be >= 1, got {sorted(snapshot_steps)}")
  if tc.grad_accum != 1:
    raise ValueError("train_group supports train.grad_accum=1 only")
  tc = dataclasses.replace(tc, steps=steps)
  init_fn, opt_init, step_fn = _group_fns(mc, tc)
  keys = jax.vmap(jax.random.key)(jnp.asarray([mb.seed for mb in members], jnp.uint32))
  params = init_fn(keys)
  opt_state = opt_init(params)
  wds = jnp.asarray([mb.weight_decay for mb in members], jnp.float32)
  snaps, losses = {}, []
  t0 = time.perf_counter()
  want = set(int(s) for s in snapshot_steps)
  for i in range(steps):
    batch = np.stack([np.asarray(ds.train_batch(i)) for ds in datasets])
    params, opt_state, met = step_fn(params, opt_state, jnp.asarray(batch), np.int32(i), wds)
    losses.append(met["loss"])
    if len(losses) > 100:
      losses.pop(0)
    if log_every and (i + 1) % log_every == 0:
      print(f"[{name}] step {i + 1}/{steps} loss {np.asarray(met['loss']).round(3).tolist()}",
            flush=True)
    if i + 1 in want:
      snaps[i + 1] = jax.device_get(params)
  loss = np.asarray(jnp.stack(losses)).astype(np.float64)
  bad = sorted(np.flatnonzero(~np.isfinite(loss).all(0)).tolist())
  if bad:  # recorded, not raised: the other members of the group are still measured
    log.warning("%s: members %s reached a non-finite training loss (lower train.lr); their "
                "collapse metrics will be NaN", name, bad)
  info = {"train_loss": loss.mean(0), "seconds": time.perf_counter() - t0, "steps": steps,
          "tokens_per_member": steps * tc.batch_size * tc.seq_len, "nonfinite_members": bad}
  return snaps, info


def _chunks(windows: np.ndarray, chunk: int):
  """Static-shape chunks (inputs, targets, valid) of packed windows [n, T+1]."""
  n = windows.shape[0]
  for s in range(0, n, chunk):
    w = windows[s:s + chunk]
    real = w.shape[0]
    valid = np.zeros((chunk, w.shape[1] - 1), bool)
    valid[:real] = True
    if real < chunk:
      w = np.concatenate([w, np.repeat(w[:1], chunk - real, 0)])
    yield jnp.asarray(w[:, :-1]), jnp.asarray(w[:, 1:]).reshape(-1), jnp.asarray(valid.ravel())


@functools.lru_cache(maxsize=16)
def _forward_fn(mc: ModelConfig, with_loss: bool):
  """jit(vmap) forward: features h (M, n, d) and, with ``with_loss``, the per-token NLL
  (M, n). Without it the head matmul and softmax are dead code that XLA removes."""
  model = Model(mc)

  def one(p, x, y):
    scores, ex = model.apply(p, x, ("h",))
    h = ex["h"].reshape(-1, ex["h"].shape[-1]).astype(jnp.float32)
    if not with_loss:
      return h, jnp.zeros((0,), jnp.float32)
    logp = jax.nn.log_softmax(scores.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, y.reshape(x.shape)[..., None], axis=-1)[..., 0]
    return h, nll.reshape(-1)

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


@functools.lru_cache(maxsize=16)
def _head_fn(mc: ModelConfig):
  return jax.jit(jax.vmap(lambda p: heads_lib.head_matrix(p, mc).astype(jnp.float32)))


_mean_upd = jax.jit(jax.vmap(C.mean_update, in_axes=(0, 0, None, None)))
_var_upd = jax.jit(jax.vmap(C.var_update, in_axes=(0, 0, None, 0, None)))


@functools.lru_cache(maxsize=4)
def _nc4_upd_fn(chunk_size: int):
  def upd(st, h, y, w, mu, wv, mv, m):
    return C.nc4_update(st, h, y, w, mu, w_valid=wv, mean_valid=mv, valid=m,
                        chunk_size=chunk_size)

  return jax.jit(jax.vmap(upd, in_axes=(0, 0, None, 0, 0, None, None, None)))


def collapse_pass(mc: ModelConfig, stacked_params, train_windows: np.ndarray,
                  val_windows: np.ndarray, *, min_count: int = 1, cdnv_exponent: float = 2.0,
                  weighted_mean: bool = False, nc4_search: str = "analyzed",
                  chunk: int = 32, block_size: int = 512, nc4_chunk_size: int = 4096,
                  feature_cache_bytes: int = 1 << 30) -> list[dict]:
  """Collapse metrics and validation loss of every member (see the module doc).

  ``train_windows`` / ``val_windows``: packed windows [n, T+1] (the same for every
  member). Returns one dict per member: every scalar key of ``collapse_metrics``,
  ``val_loss``, ``val_tokens``, ``train_tokens``, and numpy arrays ``class_ids``,
  ``per_class_cdnv``, ``per_class_interference``, ``class_counts`` (N_c of all V).
  """
  fwd, fwd_loss = _forward_fn(mc, False), _forward_fn(mc, True)
  v, d = mc.vocab_size, mc.d_model
  m = int(jax.tree.leaves(stacked_params)[0].shape[0])
  params = jax.device_put(stacked_params)
  n_train = int(train_windows.shape[0] * (train_windows.shape[1] - 1))
  cache_ok = n_train * d * 4 * m <= feature_cache_bytes
  cache = []

  # pass 1: class sums and counts
  st = jax.vmap(lambda _: C.mean_init(v, d))(jnp.arange(m))
  for x, y, valid in _chunks(train_windows, chunk):
    h, _ = fwd(params, x, y)
    st = _mean_upd(st, h, y, valid)
    if cache_ok:
      cache.append((h, y, valid))
  means, counts = jax.vmap(C.class_means)(st)
  counts_np = np.asarray(counts[0])
  C.analyzed_classes(counts_np, min_count)  # a clear error before the other passes

  # pass 2: per-class squared deviations from the class means
  vs = jax.vmap(lambda _: C.var_init(v))(jnp.arange(m))
  feats = cache if cache_ok else ((fwd(params, x, y)[0], y, valid)
                                  for x, y, valid in _chunks(train_windows, chunk))
  for h, y, valid in feats:
    vs = _var_upd(vs, h, y, means, valid)
  variances = jax.vmap(C.class_variances)(vs)
  del cache

  # pass 3: NC4 and the loss on validation tokens
  w = _head_fn(mc)(params)
  rows = [C.nc4_search_set(means[i], counts_np, w[i], min_count=min_count, search=nc4_search)
          for i in range(m)]
  w_rows = jnp.stack([r[0] for r in rows])
  mu_rows = jnp.stack([r[1] for r in rows])
  wv, mv = rows[0][2], rows[0][3]
  nc4_upd = _nc4_upd_fn(nc4_chunk_size)
  nc4 = jax.vmap(lambda _: C.nc4_init(v))(jnp.arange(m))
  nll_sum = np.zeros(m, np.float64)
  n_val = 0
  for x, y, valid in _chunks(val_windows, chunk):
    h, nll = fwd_loss(params, x, y)
    nc4 = nc4_upd(nc4, h, y, w_rows, mu_rows, wv, mv, valid)
    nll_sum += np.asarray(jnp.sum(jnp.where(valid[None], nll, 0.0), axis=1), np.float64)
    n_val += int(np.asarray(valid).sum())

  means_np, var_np, w_np = (np.asarray(a) for a in (means, variances, w))
  out = []
  for i in range(m):
    st_i = C.NC4State(hits=nc4.hits[i], counts=nc4.counts[i])
    try:
      r = C.metrics_from_stats(means_np[i], var_np[i], counts_np, w_np[i], nc4=st_i,
                               min_count=min_count, cdnv_exponent=cdnv_exponent,
                               weighted_mean=weighted_mean, block_size=block_size,
                               per_class=True)
      r["error"] = ""
    except ValueError as e:  # e.g. non-finite features of a diverged member: a NaN row
      log.warning("member %d: collapse metrics undefined: %s", i, e)
      r = {"error": str(e)[:300], "class_ids": np.zeros(0, np.int64),
           "per_class_cdnv": np.zeros(0), "per_class_interference": np.zeros(0)}
    r["val_loss"] = float(nll_sum[i] / max(n_val, 1))
    r["val_tokens"] = n_val
    r["train_tokens"] = n_train
    r["class_counts"] = counts_np
    out.append(r)
  return out
