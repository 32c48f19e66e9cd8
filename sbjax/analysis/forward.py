"""The compute kernels of the analysis: grouped (vmapped) forwards, the chunked passes
over the fixed samples, and the weight metrics, each jitted once per model config and shape
(``cached_forward``, ``cached_weight_metrics``). PER: ``sbjax.analysis.layerwise.layer_pers``
(the float32 device path)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import heads as heads_lib
from sbjax import metrics as M
from sbjax.analysis import layerwise
from sbjax.analysis.samples import Samples
from sbjax.analysis.settings import Settings
from sbjax.model import Model


EVAL_LOSS_CHUNK = 2048  # tokens per chunk of the analysis's loss when the model sets none


def eval_model_config(mc):
  """The model config the analysis's forwards run: ``mc`` with the token-chunked loss
  (``loss_chunk = EVAL_LOSS_CHUNK``, ``Model.head_loss_sums``) when it has none: the same
  float32 NLL and argmax sums as the full B·T×V log-softmax, without forming it."""
  return mc if mc.loss_chunk else dataclasses.replace(mc, loss_chunk=EVAL_LOSS_CHUNK)


def make_group_forward(model: Model, take: tuple, loss_rows: int):
  """Grouped forward that returns only what the analysis keeps, on ``eval_model_config``.

  ``take``: static tuple of (name, n_seq, last): intermediate ``name`` of the first
  ``n_seq`` sequences (all positions, or the last one). With ``loss_rows`` > 0: the sums
  of the next-token NLL and of correct argmax predictions over the first ``loss_rows``
  sequences ("nll", "correct"), from the token-chunked loss (the K×B×T×V scores are never
  formed). Returns a jitted ``f(stacked_params, inputs_BxT, targets_BxT) -> dict`` of arrays
  with a leading K axis.
  """
  model = Model(eval_model_config(model.cfg))
  collect = tuple(dict.fromkeys(t[0] for t in take))

  def one(params, inputs, targets):
    out = {}
    h, ex = model.trunk(params, inputs, collect)
    if loss_rows:
      y = targets[:loss_rows].reshape(-1)
      out["nll"], out["correct"] = model.head_loss_sums(
          params, h[:loss_rows].reshape(y.shape[0], -1), y)
    for name, n, last in take:
      a = ex[name][..., :n, :, :]  # batch axis is -3 for L×B×T×D and B×T×D
      out[f"{name}_last" if last else name] = a[..., -1, :] if last else a
    return out

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


aniso_layers = jax.jit(jax.vmap(M.anisotropy_by_layer))  # K×L×N×D -> K×L
aniso_last = jax.jit(jax.vmap(M.anisotropy))  # K×N×D -> K


@functools.lru_cache(maxsize=32)
def cached_forward(mc, take, loss_rows: int):
  """``make_group_forward`` of ``mc``, shared by every caller."""
  return make_group_forward(Model(mc), take, loss_rows)


def weight_settings(settings: Settings) -> Settings:
  """The fields make_weight_metrics reads (a hashable key for the function cache)."""
  return Settings(groups=tuple(g for g in settings.groups if g in ("spectrum", "per", "collapse")),
                  w_error_dims=settings.w_error_dims, per_mlp_r=settings.per_mlp_r,
                  spectrum_top=settings.spectrum_top)


@functools.lru_cache(maxsize=16)
def cached_weight_metrics(mc, settings: Settings):
  return make_weight_metrics(mc, settings)


def stack_params(params_list):
  """K params pytrees stacked on a new leading axis (with numpy: ``jnp.stack`` compiles one
  small program per leaf shape and group size) and placed on the default device."""
  return jax.device_put(jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                                     *params_list))


def make_weight_metrics(mc, settings: Settings):
  """jit(vmap) over stacked params (ModelConfig ``mc``): the head matrix (collapse), head
  spectrum metrics (spectrum) and per-layer PER (per); returns (fn, w_error dims)."""
  dims = np.array(sorted({d for d in settings.w_error_dims if d <= mc.d_model}), np.int32)

  def one(p):
    out = {}
    if settings.has("collapse"):
      out["w"] = heads_lib.head_matrix(p, mc).astype(jnp.float32)
    if settings.has("spectrum"):
      s, sc = M.raw_and_centred_singular_values(heads_lib.head_matrix(p, mc))
      out.update(kl=M.kl_to_uniform(s), erank=M.effective_rank(s),
                 per=M.proportional_effective_rank(s), stable=M.stable_rank(s), smax=s[0],
                 top=M.normalized_top(s, settings.spectrum_top))
      if dims.size:
        out["w_error"] = M.w_error(s, jnp.asarray(dims))
      out.update(kl_c=M.kl_to_uniform(sc), erank_c=M.effective_rank(sc))
      if dims.size:
        out["w_error_c"] = M.w_error(sc, jnp.asarray(dims))
    if settings.has("per"):
      pers = layerwise.layer_pers(p, mc, settings.per_mlp_r)
      out["per_mlp"], out["per_ov"] = pers["mlp"], pers["ov"]
    return out

  return jax.jit(jax.vmap(one)), dims


# ------------------------------------------------------------------------------ passes
def chunk_size(chunk: int, n_rows: int) -> int:
  """Sequences per forward: ``chunk`` (``Settings.batch_sequences``), or ``n_rows`` when
  fewer rows are measured (a sample of 8 sequences is one forward of 8, not of 32 padded)."""
  return max(1, min(chunk, n_rows))


def padded_chunks(rows: np.ndarray, chunk: int, n_rows: int | None = None):
  """(c0, rows[c0:c0 + c] padded to c rows by repeating its first, real) for c0 = 0, c, ...
  < n_rows (default: all rows), c = ``chunk_size(chunk, n_rows)``; padding rows are never
  read."""
  n_rows = rows.shape[0] if n_rows is None else n_rows
  chunk = chunk_size(chunk, n_rows)
  for c0 in range(0, n_rows, chunk):
    r = rows[c0:c0 + chunk]
    real = r.shape[0]
    if real < chunk:  # pad to the static chunk shape
      r = np.concatenate([r, np.repeat(r[:1], chunk - real, 0)])
    yield c0, r, real


def _chunk_plan(settings: Settings, c0: int, real: int):
  """(take, rows for h/anisotropy, rows for CKA, loss rows) of one evaluation chunk."""
  need_h = settings.has("anisotropy") or settings.has("collapse")
  nh = max(0, min(settings.eval_sequences - c0, real))
  nc = max(0, min(settings.cka_sequences - c0, real)) if settings.has("cka") else 0
  take = []
  if need_h and nh:
    take.append(("h", nh, False))
  if settings.has("anisotropy") and nh:
    take.append(("resid", nh, False))
  if nc:
    last = settings.cka_tokens == "last"
    take += [("mlp", nc, last), ("ov", nc, last)]
  return tuple(take), (nh if need_h else 0), nc, (nh if settings.has("loss") else 0)


def _keep_h(acc, o, sm: Samples, settings: Settings, c0: int, nh: int, n_layers: int):
  """Anisotropy features at the sampled positions of this chunk, and NC4 features."""
  h = np.asarray(o["h"], np.float32)  # K×nh×T×D
  kk, d, t_len = h.shape[0], h.shape[-1], sm.t_len
  lo, hi = c0 * t_len, (c0 + nh) * t_len
  loc = sm.aniso_pos[(sm.aniso_pos >= lo) & (sm.aniso_pos < hi)] - lo
  if settings.has("anisotropy"):
    r = np.asarray(o["resid"], np.float32).reshape(kk, n_layers, nh * t_len, d)
    acc["resid"].append(r[:, :, loc])
    acc["h_sel"].append(h.reshape(kk, nh * t_len, d)[:, loc])
  if settings.has("collapse"):
    acc["h"].append(h)


def eval_pass(mc, stacked, sm: Samples, settings: Settings) -> dict:
  """Loss sums, anisotropy features, NC4 features and CKA activations of a group on the
  evaluation sample: {"nll", "correct": (K,), "resid": K×L×N×D, "h_sel": K×N×D,
  "h": K×n×T×D, "mlp", "ov": K×L×n×D} (None where not computed)."""
  acc = {"nll": 0.0, "correct": 0.0, "resid": [], "h_sel": [], "h": [], "mlp": [], "ov": []}
  cka_last = settings.cka_tokens == "last"
  n_rows = settings.sample_sequences if settings.has("cka") else settings.eval_sequences
  for c0, rows, real in padded_chunks(sm.ev, settings.batch_sequences, n_rows):
    take, nh, nc, loss_rows = _chunk_plan(settings, c0, real)
    if not take and not loss_rows:
      continue
    o = jax.device_get(cached_forward(mc, take, loss_rows)(stacked, jnp.asarray(rows[:, :-1]),
                                                            jnp.asarray(rows[:, 1:])))
    if loss_rows:
      acc["nll"] = acc["nll"] + o["nll"].astype(np.float64)
      acc["correct"] = acc["correct"] + o["correct"].astype(np.float64)
    if nh:
      _keep_h(acc, o, sm, settings, c0, nh, mc.n_layers)
    for name in ("mlp", "ov") if nc else ():
      acc[name].append(layerwise.layer_activations(o, name, cka_last, mc.n_layers))
  for k in ("resid", "h_sel", "mlp", "ov"):
    acc[k] = np.concatenate(acc[k], axis=2 if k in ("resid", "mlp", "ov") else 1) if acc[k] else None
  acc["h"] = np.concatenate(acc["h"], axis=1) if acc["h"] else None
  return acc


def train_pass(mc, stacked, sm: Samples, settings: Settings) -> np.ndarray:
  """Final-norm features h (K×N×T×D) of a group on the collapse train sample."""
  hs = []
  for _, rows, real in padded_chunks(sm.tr, settings.batch_sequences):
    o = cached_forward(mc, (("h", real, False),), False)(stacked, jnp.asarray(rows[:, :-1]),
                                                         jnp.asarray(rows[:, 1:]))
    hs.append(np.asarray(jax.device_get(o["h"]), np.float32))
  return np.concatenate(hs, axis=1)
