"""The compute kernels of the analysis: grouped (vmapped) forwards and weight metrics.

Everything here is jitted once per model config and shape and shared between
``analyze_run`` calls (``cached_forward``, ``cached_weight_metrics``), so a rerun or a
resumed analysis in the same process does not recompile.

PER definitions: ``per_mlp`` = PER of the singular values of a block's ``fc_out_kernel``
(F x D), r = len(sigma) = min(F, D) when ``per_mlp_r=0`` (pico-analyze) else the top
``per_mlp_r``; ``per_ov`` = the mean over heads h of PER(sigma(W_{V,h} W_{O,h})) of each
D x D OV matrix ``v_kernel[:, h, :] @ o_kernel[h]``, with r = head_dim (its rank bound,
the authors' notebook r).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import heads as heads_lib
from sbjax import metrics as M
from sbjax.analysis.settings import Settings
from sbjax.metrics import anisotropy as anisotropy_lib
from sbjax.model import Model


def grouped_apply(model: Model, collect: Sequence[str] = ()):
  """``jax.jit(jax.vmap(model.apply, in_axes=(0, None)))`` with ``collect``: the raw grouped
  forward (scores, extras) over stacked params; the pipeline's reduced forward shares it."""
  collect = tuple(collect)
  return jax.jit(jax.vmap(lambda p, x: model.apply(p, x, collect), in_axes=(0, None)))


def make_group_forward(model: Model, take: tuple, loss_rows: int):
  """Grouped forward that returns only what the analysis keeps.

  ``take``: static tuple of (name, n_seq, last): intermediate ``name`` of the first
  ``n_seq`` sequences (all positions, or the last one). With ``loss_rows`` > 0: the sums
  of the next-token NLL and of correct argmax predictions over the first ``loss_rows``
  sequences ("nll", "correct"). With ``model.loss_chunk`` > 0 these come from the
  token-chunked loss (``Model.head_loss_sums``) and the K×B×T×V scores are never formed;
  otherwise from the full log-softmax. Returns a jitted
  ``f(stacked_params, inputs_BxT, targets_BxT) -> dict`` of arrays with a leading K axis.
  """
  collect = tuple(dict.fromkeys(t[0] for t in take))
  chunked = bool(model.cfg.loss_chunk)

  def one(params, inputs, targets):
    out = {}
    if chunked:
      h, ex = model.trunk(params, inputs, collect)
      if loss_rows:
        y = targets[:loss_rows].reshape(-1)
        out["nll"], out["correct"] = model.head_loss_sums(
            params, h[:loss_rows].reshape(y.shape[0], -1), y)
    else:
      scores, ex = model.apply(params, inputs, collect) if collect else (
          model.apply(params, inputs), {})
      if loss_rows:
        logp = jax.nn.log_softmax(scores[:loss_rows].astype(jnp.float32), axis=-1)
        t = targets[:loss_rows]
        out["nll"] = -jnp.take_along_axis(logp, t[..., None], axis=-1).sum()
        out["correct"] = (jnp.argmax(logp, -1) == t).astype(jnp.float32).sum()
    for name, n, last in take:
      a = ex[name][..., :n, :, :]  # batch axis is -3 for L×B×T×D and B×T×D
      out[f"{name}_last" if last else name] = a[..., -1, :] if last else a
    return out

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


aniso_layers = jax.jit(jax.vmap(M.anisotropy_by_layer))  # K×L×N×D -> K×L
aniso_last = jax.jit(jax.vmap(anisotropy_lib.anisotropy))  # K×N×D -> K
cka_layers = jax.jit(M.cka_to_reference_by_layer, static_argnums=2)  # (K×L×n×D, L×n×D) -> K×L


@functools.lru_cache(maxsize=32)
def cached_forward(mc, take, loss_rows: int):
  """Jitted group forwards shared by analyze_run calls (no recompilation on reruns)."""
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
  return jax.tree.map(lambda *xs: jnp.stack(xs), *params_list)


def _block(params, i: int):
  if "blocks" in params:  # scan layout: a leading layer axis
    return jax.tree.map(lambda x: x[i], params["blocks"])
  return params[f"block_{i}"]


def make_weight_metrics(mc, settings: Settings):
  """jit(vmap) over stacked params (ModelConfig ``mc``): the head matrix (collapse), head
  spectrum metrics (spectrum) and per-layer PER (per); returns (fn, w_error dims)."""
  dims = np.array(sorted({d for d in settings.w_error_dims if d <= mc.d_model}), np.int32)
  r_mlp = settings.per_mlp_r or None

  def one(p):
    out = {}
    if settings.has("collapse"):
      out["w"] = heads_lib.head_matrix(p, mc).astype(jnp.float32)
    if settings.has("spectrum"):
      s = M.singular_values(heads_lib.head_matrix(p, mc))
      out.update(kl=M.kl_to_uniform(s), erank=M.effective_rank(s),
                 per=M.proportional_effective_rank(s), stable=M.stable_rank(s), smax=s[0],
                 top=M.normalized_top(s, settings.spectrum_top))
      if dims.size:
        out["w_error"] = M.w_error(s, jnp.asarray(dims))
    if settings.has("per"):
      per_mlp, per_ov = [], []
      for i in range(mc.n_layers):
        b = _block(p, i)
        w2 = b["mlp"]["fc_out_kernel"]
        r = None if r_mlp is None else min(r_mlp, min(w2.shape))
        per_mlp.append(M.proportional_effective_rank(M.singular_values(w2), r))
        ov = jnp.einsum("dhk,hke->hde", b["attn"]["v_kernel"].astype(jnp.float32),
                        b["attn"]["o_kernel"].astype(jnp.float32))
        s_h = jax.vmap(M.singular_values)(ov)
        per_ov.append(jax.vmap(lambda s: M.proportional_effective_rank(s, mc.head_dim))(s_h).mean())
      out["per_mlp"], out["per_ov"] = jnp.stack(per_mlp), jnp.stack(per_ov)
    return out

  return jax.jit(jax.vmap(one)), dims
