"""Groups of same-shape models trained in one vmapped program, and their collapse pass.

Used by ``experiments/collapse/`` (Wu & Papyan 2024). Two pieces:

``train_group(mc, tc, members, datasets, snapshot_steps)`` (``Member``)
  Trains M members of one architecture ``mc`` together, each with its own data order,
  init seed and weight decay: the one run (``sbjax.train.train``) in memory, its members
  differing in train.{seed, data_seed, weight_decay} (``sbjax.train.members``); returns host
  copies of the stacked parameters at each snapshot step (``hooks.Snapshots``). With a
  constant learning rate after warm-up (``train.min_lr_ratio=1``) the snapshot at step S
  equals a run trained for exactly S steps, so one 3-epoch run also gives the 1-epoch model.

``collapse_pass(mc, stacked_params, train_windows, val_windows, ...)``
  The authors' three streaming passes for every member at once (features h = the
  final-norm output, the head input; labels = next tokens):

  1. train split: per-class sums and counts (``mean_update``) -> μ_c = sum_c / N_c;
  2. train split: per-class Σ‖h_i − μ_c‖² (``var_update``) -> σ_c² (two-pass variance);
  3. validation: NC4 hits (``nc4_update``, search set per ``nc4_search``) and the
     validation loss −(1/N_val) Σ log softmax(z_i)[y_i].

  ``collapse_pass_multi(..., min_counts=(1, 20))`` gives the metrics at several min_counts
  from the same forward passes (the class statistics do not depend on min_count).

  Pass 2 re-uses the features of pass 1 when they fit in ``feature_cache_bytes`` (host
  memory), otherwise it recomputes the forward, so memory is O(M·V·d) whatever the
  number of tokens. Then ``sbjax.metrics.collapse_metrics_from_stats`` per member
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

from sbjax import heads as heads_lib
from sbjax.config import Config, ModelConfig, TrainConfig
from sbjax import metrics as C
from sbjax.model import Model
from sbjax.train import hooks as H
from sbjax.train import train

log = logging.getLogger("sbjax")


@dataclasses.dataclass(frozen=True)
class Member:
  """One model of a group: init seed, data-order seed, decoupled weight decay."""

  seed: int = 0
  data_seed: int = 0
  weight_decay: float = 0.0


def train_group(mc: ModelConfig, tc: TrainConfig, members: Sequence[Member], datasets,
                snapshot_steps: Sequence[int], *, log_every: int = 0, name: str = "group"):
  """Train the members together for ``max(snapshot_steps)`` steps (see the module doc).

  ``datasets[m]`` gives member m's batches (``train_batch(i)``: B×(T+1) int32). Progress
  (``log_every`` > 0): a bar on a terminal, else a line every ``log_every`` steps.
  Returns ``(snapshots, info)``: ``snapshots[S]`` = host numpy stacked params (leading
  axis M) at step S; ``info`` = {"train_loss": (M,) mean loss of the last ≤100 steps,
  "seconds", "steps", "tokens_per_member", "nonfinite_members"}.
  """
  if len(members) < 1 or len(datasets) != len(members):
    raise ValueError(f"train_group needs one dataset per member; got {len(members)} members "
                     f"and {len(datasets)} datasets")
  if min(snapshot_steps) < 1:
    raise ValueError(f"snapshot steps must be >= 1, got {sorted(snapshot_steps)}")
  steps = int(max(snapshot_steps))
  tc = dataclasses.replace(tc, steps=steps, log_every=log_every or tc.log_every)
  cfgs = [Config(model=mc, name=name, train=dataclasses.replace(
      tc, seed=mb.seed, data_seed=mb.data_seed, weight_decay=mb.weight_decay)) for mb in members]
  snaps, losses = H.Snapshots(), H.LossWindow(100)
  t0 = time.perf_counter()
  train(cfgs, None, dataset=list(datasets), snapshot_steps=snapshot_steps, hooks=[losses, snaps],
        quiet=not log_every)
  loss = np.stack(losses.losses).astype(np.float64).reshape(len(losses.losses), len(members))
  bad = sorted(np.flatnonzero(~np.isfinite(loss).all(0)).tolist())
  if bad:  # recorded, not raised: the other members of the group are still measured
    log.warning("%s: members %s reached a non-finite training loss (lower train.lr); their "
                "collapse metrics will be NaN", name, bad)
  info = {"train_loss": loss.mean(0), "seconds": time.perf_counter() - t0, "steps": steps,
          "tokens_per_member": steps * tc.batch_size * tc.seq_len, "nonfinite_members": bad}
  if len(members) == 1:  # the plain run (N = 1) has no member axis
    return {k: jax.tree.map(lambda x: x[None], v) for k, v in snaps.snaps.items()}, info
  return snaps.snaps, info


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
    scores, ex = model.forward(p, x, ("h",))
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
                  val_windows: np.ndarray, *, min_count: int = 1, **kw) -> list[dict]:
  """Collapse metrics and validation loss of every member at one ``min_count`` (see the
  module doc and :func:`collapse_pass_multi`, whose keywords it takes).

  ``train_windows`` / ``val_windows``: packed windows [n, T+1] (the same for every
  member). Returns one dict per member: every scalar key of ``collapse_metrics``,
  ``val_loss``, ``val_tokens``, ``train_tokens``, ``error`` ('' or why the metrics are
  undefined) and numpy arrays ``class_ids``, ``per_class_cdnv``,
  ``per_class_interference``, ``class_counts`` (N_c of all V).
  """
  res = collapse_pass_multi(mc, stacked_params, train_windows, val_windows,
                            min_counts=(min_count,), **kw)
  return [r[min_count] for r in res]


def _class_stats(fwd, params, train_windows, chunk, v, d, m, feature_cache_bytes):
  """Passes 1 and 2: (means, variances, counts numpy) of every member (train split)."""
  n_train = int(train_windows.shape[0] * (train_windows.shape[1] - 1))
  cache_ok = n_train * d * 4 * m <= feature_cache_bytes
  cache = []
  st = jax.vmap(lambda _: C.mean_init(v, d))(jnp.arange(m))
  for x, y, valid in _chunks(train_windows, chunk):
    h, _ = fwd(params, x, y)
    st = _mean_upd(st, h, y, valid)
    if cache_ok:
      cache.append((h, y, valid))
  means, counts = jax.vmap(C.class_means)(st)
  counts_np = np.asarray(counts[0])
  vs = jax.vmap(lambda _: C.var_init(v))(jnp.arange(m))
  feats = cache if cache_ok else ((fwd(params, x, y)[0], y, valid)
                                  for x, y, valid in _chunks(train_windows, chunk))
  for h, y, valid in feats:
    vs = _var_upd(vs, h, y, means, valid)
  return means, jax.vmap(C.class_variances)(vs), counts_np, n_train


def _usable(counts_np, min_counts) -> dict:
  """{min_count: '' or why it has < 2 analysed classes}; the smallest must be usable."""
  why = {}
  for mcount in min_counts:
    try:
      C.analyzed_classes(counts_np, mcount)
      why[mcount] = ""
    except ValueError as e:
      why[mcount] = str(e)[:300]
  if why[min(min_counts)]:
    C.analyzed_classes(counts_np, min(min_counts))  # a clear error before the other passes
  return why


def collapse_pass_multi(mc: ModelConfig, stacked_params, train_windows: np.ndarray,
                        val_windows: np.ndarray, *, min_counts=(1,), cdnv_exponent: float = 2.0,
                        weighted_mean: bool = False, nc4_search: str = "analyzed",
                        chunk: int = 32, block_size: int = 512, nc4_chunk_size: int = 4096,
                        feature_cache_bytes: int = 1 << 30) -> list[dict]:
  """:func:`collapse_pass` at several ``min_counts`` from one set of forward passes: per
  member a dict {min_count: result dict}. The class statistics (passes 1-2) and the
  validation loss are shared; NC4 (its search set depends on min_count) and the metrics
  are per min_count. A min_count with < 2 analysed classes gives a row with ``error`` set
  (the smallest one raises, as :func:`collapse_pass`)."""
  fwd, fwd_loss = _forward_fn(mc, False), _forward_fn(mc, True)
  v, d = mc.vocab_size, mc.d_model
  m = int(jax.tree.leaves(stacked_params)[0].shape[0])
  params = jax.device_put(stacked_params)
  means, variances, counts_np, n_train = _class_stats(fwd, params, train_windows, chunk, v, d, m,
                                                      feature_cache_bytes)
  why = _usable(counts_np, min_counts)
  ok = [mcount for mcount in min_counts if not why[mcount]]

  # pass 3: NC4 (per min_count) and the loss on validation tokens
  w = _head_fn(mc)(params)
  sets = {}
  for mcount in ok:
    rows = [C.nc4_search_set(means[i], counts_np, w[i], min_count=mcount, search=nc4_search)
            for i in range(m)]
    sets[mcount] = (jnp.stack([r[0] for r in rows]), jnp.stack([r[1] for r in rows]),
                    rows[0][2], rows[0][3])
  nc4_upd = _nc4_upd_fn(nc4_chunk_size)
  nc4 = {mcount: jax.vmap(lambda _: C.nc4_init(v))(jnp.arange(m)) for mcount in ok}
  nll_sum = np.zeros(m, np.float64)
  n_val = 0
  for x, y, valid in _chunks(val_windows, chunk):
    h, nll = fwd_loss(params, x, y)
    for mcount in ok:
      nc4[mcount] = nc4_upd(nc4[mcount], h, y, *sets[mcount], valid)
    nll_sum += np.asarray(jnp.sum(jnp.where(valid[None], nll, 0.0), axis=1), np.float64)
    n_val += int(np.asarray(valid).sum())

  arrays = tuple(np.asarray(a) for a in (means, variances, w))
  common = {"val_tokens": n_val, "train_tokens": n_train, "class_counts": counts_np}
  out = []
  for i in range(m):
    per = {}
    for mcount in min_counts:
      st_i = C.NC4State(hits=nc4[mcount].hits[i], counts=nc4[mcount].counts[i]) if mcount in nc4 else None
      r = _member_metrics(i, arrays, counts_np, st_i, why[mcount], min_count=mcount,
                          cdnv_exponent=cdnv_exponent, weighted_mean=weighted_mean,
                          block_size=block_size)
      r.update(common, val_loss=float(nll_sum[i] / max(n_val, 1)))
      per[mcount] = r
    out.append(per)
  return out


def _member_metrics(i, arrays, counts_np, nc4_state, why: str, **kw) -> dict:
  """collapse_metrics_from_stats of member i (per_class=True; the per-class arrays of the
  analysed classes, ``class_ids``), or an error row (never raises)."""
  means_np, var_np, w_np = arrays
  empty = {"class_ids": np.zeros(0, np.int64), "per_class_cdnv": np.zeros(0),
           "per_class_interference": np.zeros(0)}
  if why:
    return {"error": why, **empty}
  try:
    res = C.collapse_metrics_from_stats(means_np[i], var_np[i], counts_np, w_np[i], nc4=nc4_state,
                                        options=C.CollapseOptions(per_class=True, **kw))
    r, ids = res.to_dict(), np.flatnonzero(res.class_analyzed)
    del r["class_analyzed"]
    r.update(class_ids=ids, per_class_cdnv=res.per_class_cdnv[ids],
             per_class_interference=res.per_class_interference[ids])
    r["error"] = ""
    r["unc3_reason"] = C.unc3_reason(r["nc3_cos_mean"], r["nc3_cos_se"])
  except ValueError as e:  # e.g. non-finite features of a diverged member: a NaN row
    log.warning("member %d: collapse metrics undefined: %s", i, e)
    r = {"error": str(e)[:300], **empty}
  return r
