"""The per-checkpoint measurement of layer convergence (Diehl Martinez, Lesci & Buttery 2024).

On fixed probe batches of n validation windows (``probe_batches``; the same tokens for every
checkpoint), per layer l: the activations (``sbjax.analysis.forward``) ``mlp`` (block l's MLP
output, bias included) and ``ov`` (the OV circuit Σ_h (LN1(x) W_V,h + b_V,h) W_O,h, no
attention weighting, no output bias), at the last position of each sequence (``last``, the
authors' protocol) or at every position of the first ``all_sequences`` (``all``); their linear
CKA to the final checkpoint's, biased (Kornblith et al. 2019) or debiased (Song et al. 2012)
HSIC (probe 0: both token modes and estimators; further probes: last, biased); the PER of
block l's ``fc_out_kernel`` and the mean over heads of PER(W_V,h W_O,h) (float64 host spectra,
``sbjax.analysis.layerwise``) at the r of ``ranks``: ``weights`` (MLP: ``per_mlp_r`` or all;
OV: head_dim), ``full`` (every singular value), ``head_dim`` (the authors' notebook) and, with
``grad_per``, ``gradients`` (of the fixed batch's mean NLL: dL/d fc_out and G_h = gV_h W_O,h +
W_V,h gO_h, r = 2 head_dim). A row per checkpoint: ``eval_loss`` (on the fixed batch),
``cka<probe>_<kind>_<tokens>_<estimator>_<layer>``, ``per_<source>_<kind>_<layer>``.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

from sbjax.analysis import forward as fw
from sbjax.analysis import layerwise, samples
from sbjax.model import Model

log = logging.getLogger("sbjax")
KINDS, ESTIMATORS, TOKEN_MODES = layerwise.KINDS, layerwise.ESTIMATORS, ("last", "all")


def probe_batches(ds, n: int, k: int) -> list[np.ndarray]:
  """Up to k disjoint int32 [n, T+1] batches of validation windows: probe 0 = the first n
  (``samples.eval_sample``), probe j ≥ 1 = the next n windows of ``eval_sample(ds, k n)``
  (spread over the split) whose tokens are in no earlier probe. Fewer when the split is short."""
  probes = [samples.eval_sample(ds, n)]
  n_val = getattr(ds, "n_val_windows", None)
  fit = k if n_val is None else min(k, int(n_val) // n)
  if fit > 1:
    seen = {r.tobytes() for r in probes[0]}
    pool = [r for r in samples.eval_sample(ds, fit * n) if r.tobytes() not in seen]
    probes += [np.stack(pool[j * n:(j + 1) * n]) for j in range(min(fit - 1, len(pool) // n))]
  if len(probes) < k:
    log.warning("the validation split holds %s windows: %d disjoint probe batch(es) of %d "
                "sequences instead of %d", n_val, len(probes), n, k)
  return probes


@functools.lru_cache(maxsize=16)
def _grads_fn(mc):
  """jit(vmap over K): the gradients of the batch's mean next-token NLL w.r.t. the blocks."""
  model = Model(mc)

  def loss(q, inputs, targets):
    logp = jax.nn.log_softmax(model.apply(q, inputs).astype(jnp.float32), -1)
    return -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0].mean()

  keep = lambda g: {k: v for k, v in g.items() if k.startswith("block")}  # noqa: E731
  return jax.jit(jax.vmap(lambda *a: keep(jax.grad(loss)(*a)), in_axes=(0, None, None)))


def stack(plist, k: int):
  """(host, device) stacks of the params list padded to k with its last (one compiled shape)."""
  plist = list(plist) + [plist[-1]] * (k - len(plist))
  host = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *plist)
  return host, jax.device_put(host)


def activations(mc, stacked, batch, knobs, probe: int):
  """({(kind, mode): K x L x n x D numpy}, K NLL sums over the batch) from the analysis's
  grouped forward (one compiled program per chunk shape); probe ≥ 1: ``last`` only."""
  modes = TOKEN_MODES if probe == 0 else TOKEN_MODES[:1]
  c, n_layers, t_len = knobs.chunk, mc.n_layers, batch.shape[1] - 1
  n_all = min(knobs.all_sequences or knobs.n_sequences, knobs.n_sequences)
  take = tuple((k, c, m == "last") for m in modes for k in KINDS)
  parts, nll = {(k, m): [] for k in KINDS for m in modes}, 0.0
  for c0, rows, real in fw.padded_chunks(batch, c):
    o = jax.device_get(fw.cached_forward(mc, take, real)(stacked, jnp.asarray(rows[:, :-1]),
                                                         jnp.asarray(rows[:, 1:])))
    nll = nll + np.asarray(o["nll"], np.float64)
    for kind in KINDS:  # padding rows (beyond ``real``) are dropped
      a = layerwise.layer_activations(o, kind, True, n_layers)
      parts[(kind, "last")].append(a[:, :, :real])
      if "all" in modes and c0 < n_all:
        a = layerwise.layer_activations(o, kind, False, n_layers)
        parts[(kind, "all")].append(a[:, :, :min(n_all - c0, real) * t_len])
  return {k: np.concatenate(v, axis=2) for k, v in parts.items()}, nll


def references(mc, final_params, batches, knobs) -> list[dict]:
  """The final checkpoint's activations on each probe batch (the CKA reference; same shapes)."""
  _, stacked = stack([final_params], knobs.group_size)
  return [{key: a[0] for key, a in activations(mc, stacked, b, knobs, p)[0].items()}
          for p, b in enumerate(batches)]


def ranks(mc, knobs) -> dict:
  """{source: (r of the MLP PER, r of the OV PER)} (module doc)."""
  return {"weights": layerwise.default_ranks(mc, knobs.per_mlp_r),
          "gradients": layerwise.default_ranks(mc, knobs.per_mlp_r, grads=True),
          "full": (min(mc.ff_dim, mc.d_model), mc.d_model),
          "head_dim": (min(mc.head_dim, mc.ff_dim, mc.d_model), mc.head_dim)}


def _pers(mc, params, knobs, grads=None) -> dict:
  """{source: layer_pers} of one checkpoint (module doc)."""
  r = ranks(mc, knobs)
  if grads is not None:
    return {"gradients": layerwise.layer_pers(params, mc, *r["gradients"], host=True,
                                              grads=grads)}
  return {src: layerwise.layer_pers(params, mc, *r[src], host=True)
          for src in ("weights", "full", "head_dim")}


def measure_group(mc, plist, batches, refs, knobs) -> list[dict]:
  """The rows (module doc) of at most ``knobs.group_size`` checkpoints ``plist``."""
  host, stacked = stack(plist, knobs.group_size)
  rows = [{} for _ in plist]
  for probe, (batch, ref) in enumerate(zip(batches, refs)):
    acts, nll = activations(mc, stacked, batch, knobs, probe)
    if probe == 0:
      for j, row in enumerate(rows):
        row["eval_loss"] = float(nll[j]) / (batch.shape[0] * (batch.shape[1] - 1))
    ests = ESTIMATORS if probe == 0 else ESTIMATORS[:1]
    for (kind, mode), a in acts.items():
      for e, v in jax.device_get(layerwise.cka_to_reference(a, ref[(kind, mode)], ests)).items():
        for j, row in enumerate(rows):
          row.update({f"cka{probe}_{kind}_{mode}_{e}_{l}": float(v[j, l])
                      for l in range(mc.n_layers)})
  pers = [_pers(mc, p, knobs) for p in plist]
  if knobs.grad_per:
    b = batches[0]
    g = jax.device_get(_grads_fn(mc)(stacked, b[:, :-1], b[:, 1:]))
    for j, p in enumerate(pers):
      at = functools.partial(jax.tree.map, lambda x, j=j: x[j])
      p.update(_pers(mc, at(host), knobs, grads=at(g)))
  for row, p in zip(rows, pers):
    row.update({f"per_{src}_{kind}_{l}": float(v[kind][l]) for src, v in p.items()
                for kind in KINDS for l in range(mc.n_layers)})
  return rows
