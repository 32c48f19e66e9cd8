"""Per-layer measures over checkpoints, shared by the run analysis (the ``per`` and ``cka``
groups) and the convergence experiment.

PER (proportional effective rank, ``sbjax.metrics.proportional_effective_rank``): with sigma
the singular values (descending) and p_i = sigma_i / sum_{j<=r} sigma_j over the top r,

    PER = exp(-sum_{i<=r} p_i log p_i) / r.

* ``mlp``: of block l's ``fc_out_kernel`` (F x D); r = len(sigma) = min(F, D) by default
  (pico-analyze) or the top ``r_mlp`` (the authors' notebook).
* ``ov``: the MEAN over heads h of PER(M_h), M_h = W_V,h W_O,h = ``v_kernel[:, h, :] @
  o_kernel[h]`` (D x D, rank <= head_dim); r = head_dim by default (its rank bound).
* of the gradients (``grads``): G = dL/d fc_out_kernel, and for the OV circuit the
  first-order change of M_h, G_h = gV_h W_O,h + W_V,h gO_h (rank <= 2 head_dim; r =
  min(2 head_dim, D) by default).

One definition, two precisions (``host``), equal to the float32 Gram's accuracy:

* ``host=False`` (default): jax.numpy in float32 on the device, pure and vmappable; sigma
  from ``sbjax.metrics.singular_values`` (float32 Gram), each D x D M_h / G_h formed.
* ``host=True``: float64 numpy on the host, one matrix at a time (no LAPACK inside a jitted
  program): sigma(fc_out) by SVD; sigma of a product A B^T as sigma(R_a R_b^T) from reduced
  QRs A = Q_a R_a, B = Q_b R_b (exact, k x k). The PER of the spectra is taken in float32.

CKA to a reference checkpoint (``cka_to_reference``): c(k, l) = linear CKA (biased or
debiased HSIC) of checkpoint k's layer-l activations on the fixed samples and the reference's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import metrics as M

KINDS = ("mlp", "ov")
ESTIMATORS = ("biased", "debiased")


def block(params, i: int):
  """Block i's parameters (either layout: ``block_<i>`` or scanned ``blocks``)."""
  if "blocks" in params:  # scan layout: a leading layer axis
    return jax.tree.map(lambda x: x[i], params["blocks"])
  return params[f"block_{i}"]


def default_ranks(mc, r_mlp: int = 0, r_ov: int = 0, *, grads: bool = False) -> tuple[int, int]:
  """(r of the MLP PER, r of the OV PER): ``r_mlp`` (capped at min(F, D)) or min(F, D);
  ``r_ov`` or head_dim (weights) / 2 head_dim (gradients), capped at D."""
  full = min(mc.ff_dim, mc.d_model)
  rm = min(r_mlp, full) if r_mlp else full
  return rm, min(r_ov or (2 if grads else 1) * mc.head_dim, mc.d_model)


# ------------------------------------------------------------------------------ host float64
def _product_sv(a_DxR, b_DxR) -> np.ndarray:
  """Singular values of A B^T without forming it: A = Q_a R_a, B = Q_b R_b (reduced QR,
  orthonormal columns), so sigma(A B^T) = sigma(R_a R_b^T) (small, R x R at most)."""
  _, ra = np.linalg.qr(a_DxR)
  _, rb = np.linalg.qr(b_DxR)
  return np.linalg.svd(ra @ rb.T, compute_uv=False)


def ov_singular_values(v_kernel, o_kernel, v_grad=None, o_grad=None) -> np.ndarray:
  """H x k singular values (descending) per head of M_h = W_V,h W_O,h (k = head_dim), or,
  with the gradients, of G_h = gV_h W_O,h + W_V,h gO_h = [gV_h, W_V,h] [W_O,h^T, gO_h^T]^T
  (k = 2 head_dim, or D if smaller). float64, exact (see ``_product_sv``)."""
  wv, wo = np.asarray(v_kernel, np.float64), np.asarray(o_kernel, np.float64)
  out = []
  for h in range(wv.shape[1]):
    if v_grad is None:
      a, b = wv[:, h, :], wo[h].T
    else:
      a = np.concatenate([np.asarray(v_grad, np.float64)[:, h, :], wv[:, h, :]], axis=1)
      b = np.concatenate([wo[h].T, np.asarray(o_grad, np.float64)[h].T], axis=1)
    out.append(_product_sv(a, b))
  return np.stack(out)


@functools.partial(jax.jit, static_argnums=1)
def _per_vmapped(s, r):
  return jax.vmap(lambda x: M.proportional_effective_rank(x, r))(s)


def _per_rows(spectra, r: int) -> np.ndarray:
  """PER of each row of an N x k array of descending spectra over the top r (zero-padded
  when k < r), with ``sbjax.metrics.proportional_effective_rank``."""
  s = np.asarray(spectra, np.float32)
  if s.shape[1] < r:
    s = np.concatenate([s, np.zeros((s.shape[0], r - s.shape[1]), s.dtype)], axis=1)
  return np.asarray(_per_vmapped(jnp.asarray(s[:, :r]), r))


def _pers_host(params, mc, r_mlp: int, r_ov: int, grads) -> dict:
  mlp_s, ov_s = [], []
  for i in range(mc.n_layers):
    b = block(params, i)
    if grads is None:
      w2 = b["mlp"]["fc_out_kernel"]
      ov_s.append(ov_singular_values(b["attn"]["v_kernel"], b["attn"]["o_kernel"]))
    else:
      g = block(grads, i)
      w2 = g["mlp"]["fc_out_kernel"]
      ov_s.append(ov_singular_values(b["attn"]["v_kernel"], b["attn"]["o_kernel"],
                                     g["attn"]["v_kernel"], g["attn"]["o_kernel"]))
    mlp_s.append(np.linalg.svd(np.asarray(w2, np.float64), compute_uv=False))
  mlp = _per_rows(np.stack(mlp_s), r_mlp)
  ov_heads = _per_rows(np.concatenate(ov_s), r_ov).reshape(mc.n_layers, mc.n_heads)
  return {"mlp": mlp, "ov": ov_heads.mean(-1), "ov_heads": ov_heads}


# ------------------------------------------------------------------------------ device float32
def _ov_device(attn, gattn=None):
  """H x D x D: M_h = W_V,h W_O,h, or G_h = gV_h W_O,h + W_V,h gO_h (float32 products at
  HIGHEST precision: float32 on every backend, as ``sbjax.metrics``)."""
  mm = functools.partial(jnp.einsum, "dhk,hke->hde", precision=jax.lax.Precision.HIGHEST)
  wv, wo = attn["v_kernel"].astype(jnp.float32), attn["o_kernel"].astype(jnp.float32)
  if gattn is None:
    return mm(wv, wo)
  gv, go = gattn["v_kernel"].astype(jnp.float32), gattn["o_kernel"].astype(jnp.float32)
  return mm(gv, wo) + mm(wv, go)


def _pers_device(params, mc, r_mlp: int | None, r_ov: int, grads) -> dict:
  per_mlp, per_ov, heads = [], [], []
  for i in range(mc.n_layers):
    b = block(params, i)
    g = None if grads is None else block(grads, i)
    w2 = (b if g is None else g)["mlp"]["fc_out_kernel"]
    r = None if r_mlp is None else min(r_mlp, min(w2.shape))
    per_mlp.append(M.proportional_effective_rank(M.singular_values(w2), r))
    s_h = jax.vmap(M.singular_values)(_ov_device(b["attn"], None if g is None else g["attn"]))
    h = jax.vmap(lambda s: M.proportional_effective_rank(s, r_ov))(s_h)
    heads.append(h)
    per_ov.append(h.mean())
  return {"mlp": jnp.stack(per_mlp), "ov": jnp.stack(per_ov), "ov_heads": jnp.stack(heads)}


def layer_pers(params, mc, r_mlp: int = 0, r_ov: int = 0, *, host: bool = False,
               grads=None) -> dict:
  """PER per layer of one checkpoint (ModelConfig ``mc``; see the module doc):
  {"mlp": (L,), "ov": (L,) = mean over heads, "ov_heads": (L, H)}.

  ``r_mlp`` / ``r_ov``: 0 = the defaults (``default_ranks``). ``grads`` (params-shaped, or
  holding at least each block's fc_out_kernel, v_kernel and o_kernel): the PER of the
  gradients instead. ``host=False``: float32 jax.numpy (jit/vmap-able); ``host=True``:
  float64 numpy spectra on the host, numpy results.
  """
  rm, ro = default_ranks(mc, r_mlp, r_ov, grads=grads is not None)
  if host:
    return _pers_host(params, mc, rm, ro, grads)
  # r_mlp = 0: the full spectrum, r = len(sigma) (the same number as r = min(F, D))
  return _pers_device(params, mc, rm if r_mlp else None, ro, grads)


# ------------------------------------------------------------------------------ CKA
@functools.partial(jax.jit, static_argnums=2)
def cka_to_reference(acts, ref, estimators: tuple = ("biased",)) -> dict:
  """{estimator: K x L CKA} of ``acts`` (K x L x n x D) to ``ref`` (L x n x D); one program,
  so the Gram matrices shared by the estimators are computed once."""
  return {e: M.cka_to_reference_by_layer(acts, ref, e == "debiased") for e in estimators}


def layer_activations(out: dict, name: str, last: bool, n_layers: int) -> np.ndarray:
  """K x L x n x D float32 activations ``name`` (``mlp``/``ov``) of a grouped forward's output
  (``forward.make_group_forward`` with ``take`` entry (name, n_seq, last)): the last
  position of each of the n sequences, or all their positions (n = n_seq * T)."""
  a = np.asarray(out[f"{name}_last" if last else name], np.float32)
  return a.reshape(a.shape[0], n_layers, -1, a.shape[-1])
