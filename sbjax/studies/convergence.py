"""Layer convergence (Diehl Martinez, Lesci & Buttery 2024, "Tending Towards Stability").

For every checkpoint s of a run (or of an imported Hugging Face series) and every
layer l, on ONE fixed batch of n sequences (the same tokens for every checkpoint):

* activations: ``mlp`` = the output of block l's MLP down-projection
  (``fc_out``, bias included); ``ov`` = the attention OV circuit
  ``sum_h (LN1(x) W_V,h + b_V,h) W_O,h`` of the block's normalised input, i.e.
  V_h W_{O,h}^T per head (torch layout) summed over heads, with no attention
  weighting and without the output bias (``Model.apply(collect=("ov",))``; heads are
  split per head from the D x H x Dh kernels, and the HF import splits GPT-NeoX's
  fused, head-major ``query_key_value`` per head, so the authors' "last third of the
  fused QKV" quirk does not arise);
* CKA-to-final: c(s, l) = CKA(A_s,l, A_S,l), A = the n x D activations at the last
  position of each sequence (``tokens="last"``, the authors' protocol) or the
  (n_all * T) x D activations at all positions of the first ``all_sequences``
  sequences (``tokens="all"``); S = the final checkpoint. CKA is linear CKA with the
  biased HSIC (``estimator="biased"``, Kornblith et al. 2019, the authors' code) or the
  debiased HSIC (``"debiased"``, Song et al. 2012); see ``sbjax.metrics.cka``.
  c(S, l) = 1 exactly.
* PER (proportional effective rank, ``sbjax.metrics.spectrum``): with sigma the
  singular values and p_i = sigma_i / sum_{j<=r} sigma_j over the top r,
  PER = exp(-sum_{i<=r} p_i log p_i) / r.
  ``mlp``: of block l's ``fc_out_kernel`` (F x D), r = ``per_mlp_r`` or min(F, D).
  ``ov``: the MEAN over heads h of PER(W_V,h W_O,h) (each D x D, rank <= head_dim),
  r = ``per_ov_r`` or head_dim.
  Optionally (``grad_per``) of their gradients: G = dL/d fc_out_kernel and, for the OV
  circuit, the first-order change of M_h = W_V,h W_O,h under the gradient,
  G_M,h = (dL/dW_V,h) W_O,h + W_V,h (dL/dW_O,h) (rank <= 2 head_dim; r = min(2 head_dim,
  D) unless ``per_ov_r`` is set), with L the mean next-token cross-entropy of the fixed
  batch.
  Singular values are computed on the host in float64 numpy; those of a product A B^T
  (D x D, rank <= k) as sigma(R_a R_b^T) from reduced QRs A = Q_a R_a, B = Q_b R_b (exact,
  k x k), so no D x D matrix is decomposed.

Summaries (numpy, from the long tables ``measure`` returns):

* ``percentile_bands``: the q-th percentiles (q = 10, 25, 50, 75, 90) over layers of
  c(s, l) at each step (the authors' main figure);
* ``first_step_reaching``: min{s : c(s, l) >= frac * c(S, l)} (frac = 0.9), and
  ``stable_step``: the first s after which c stays >= frac * c(S, l);
* ``pearson`` / ``spearman`` (Spearman = Pearson of average ranks, ties averaged) of
  those steps with the layer's PER.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import metrics as M
from sbjax.config import ModelConfig
from sbjax.model import Model

KINDS = ("mlp", "ov")
TOKEN_MODES = ("last", "all")
ESTIMATORS = ("biased", "debiased")
PERCENTILES = (10, 25, 50, 75, 90)


def _err(field, value, allowed) -> ValueError:
  return ValueError(f"invalid convergence setting: {field}={value!r}; allowed: {allowed}")


@dataclasses.dataclass(frozen=True)
class ConvergenceSettings:
  """What ``measure`` computes. ``n_sequences`` rows of the fixed batch are used for
  ``tokens="last"``; the first ``all_sequences`` (0 = all n) for ``tokens="all"``."""

  n_sequences: int = 128
  all_sequences: int = 0
  token_modes: tuple = TOKEN_MODES
  estimators: tuple = ESTIMATORS
  per_mlp_r: int = 0  # 0 = min(F, D) (pico-analyze); > 0 = top r
  per_ov_r: int = 0  # 0 = head_dim (weights) / min(2 head_dim, D) (gradients)
  grad_per: bool = False
  group_size: int = 4  # checkpoints per vmapped forward
  chunk: int = 32  # sequences per forward call

  def __post_init__(self):
    for f in ("token_modes", "estimators"):
      v = getattr(self, f)
      if isinstance(v, str):
        v = tuple(x.strip() for x in v.split(",") if x.strip())
      object.__setattr__(self, f, tuple(v))
    bad = [t for t in self.token_modes if t not in TOKEN_MODES]
    if bad or not self.token_modes:
      raise _err("token_modes", self.token_modes, "a non-empty subset of last,all")
    bad = [e for e in self.estimators if e not in ESTIMATORS]
    if bad or not self.estimators:
      raise _err("estimators", self.estimators, "a non-empty subset of biased,debiased")
    for f in ("n_sequences", "group_size", "chunk"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 1:
        raise _err(f, v, "an integer >= 1")
    for f in ("all_sequences", "per_mlp_r", "per_ov_r"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 0:
        raise _err(f, v, "an integer >= 0")
    need = 4 if "debiased" in self.estimators else 2
    if "last" in self.token_modes and self.n_sequences < need:
      raise _err("n_sequences", self.n_sequences, f">= {need} (CKA needs that many samples)")

  @property
  def n_all(self) -> int:
    return min(self.all_sequences or self.n_sequences, self.n_sequences)

  def to_dict(self) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v)
            for k, v in dataclasses.asdict(self).items()}

  def replace(self, **kw) -> "ConvergenceSettings":
    return dataclasses.replace(self, **kw)


# ------------------------------------------------------------------------------ weights
# Spectra are computed on the host in float64 numpy, one matrix at a time: LAPACK calls
# inside a jitted, vmapped program (many independent SVDs that XLA may run concurrently)
# were seen to deadlock in the bundled OpenBLAS on 2-core CPUs.
def _block(params, i: int):
  if "blocks" in params:  # scan layout: a leading layer axis
    return jax.tree.map(lambda x: x[i], params["blocks"])
  return params[f"block_{i}"]


def ov_matrices(attn_params):
  """H x D x D per-head OV matrices M_h = W_V,h W_O,h = v_kernel[:, h, :] @ o_kernel[h]."""
  return jnp.einsum("dhk,hke->hde", jnp.asarray(attn_params["v_kernel"], jnp.float32),
                    jnp.asarray(attn_params["o_kernel"], jnp.float32))


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


def per_ranks(mc: ModelConfig, settings: ConvergenceSettings) -> dict:
  """The r of each PER (weights: mlp, ov; gradients: grad_mlp, grad_ov)."""
  full_mlp = min(mc.ff_dim, mc.d_model)
  r_mlp = min(settings.per_mlp_r, full_mlp) if settings.per_mlp_r else full_mlp
  return {"mlp": r_mlp, "ov": min(settings.per_ov_r or mc.head_dim, mc.d_model),
          "grad_mlp": r_mlp, "grad_ov": min(settings.per_ov_r or 2 * mc.head_dim, mc.d_model)}


def _per_rows(spectra, r: int) -> np.ndarray:
  """PER of each row of an N x k array of descending spectra over the top r (zero-padded
  when k < r), with ``sbjax.metrics.proportional_effective_rank``."""
  s = np.asarray(spectra, np.float32)
  if s.shape[1] < r:
    s = np.concatenate([s, np.zeros((s.shape[0], r - s.shape[1]), s.dtype)], axis=1)
  return np.asarray(_per_vmapped(jnp.asarray(s[:, :r]), r))


@functools.partial(jax.jit, static_argnums=1)
def _per_vmapped(s, r):
  return jax.vmap(lambda x: M.proportional_effective_rank(x, r))(s)


def layer_pers(params, mc: ModelConfig, settings: ConvergenceSettings, grads=None) -> dict:
  """PER per layer of one checkpoint: {"mlp": (L,), "ov": (L,) = mean over heads,
  "ov_heads": (L, H)}; of the gradients when ``grads`` (params-shaped, or holding at least
  each block's fc_out_kernel, v_kernel and o_kernel) is given."""
  rk = per_ranks(mc, settings)
  r_mlp, r_ov = (rk["grad_mlp"], rk["grad_ov"]) if grads is not None else (rk["mlp"], rk["ov"])
  mlp_s, ov_s = [], []
  for i in range(mc.n_layers):
    b = _block(params, i)
    if grads is None:
      w2 = b["mlp"]["fc_out_kernel"]
      ov_s.append(ov_singular_values(b["attn"]["v_kernel"], b["attn"]["o_kernel"]))
    else:
      g = _block(grads, i)
      w2 = g["mlp"]["fc_out_kernel"]
      ov_s.append(ov_singular_values(b["attn"]["v_kernel"], b["attn"]["o_kernel"],
                                     g["attn"]["v_kernel"], g["attn"]["o_kernel"]))
    mlp_s.append(np.linalg.svd(np.asarray(w2, np.float64), compute_uv=False))
  mlp = _per_rows(np.stack(mlp_s), r_mlp)
  ov_heads = _per_rows(np.concatenate(ov_s), r_ov).reshape(mc.n_layers, mc.n_heads)
  return {"mlp": mlp, "ov": ov_heads.mean(-1), "ov_heads": ov_heads}


# ------------------------------------------------------------------------------ sources
@dataclasses.dataclass
class Source:
  """A sequence of checkpoints of one model: ``name``, ModelConfig, sorted ``steps`` and
  ``load(steps) -> [params]`` (in the order of ``steps``)."""

  name: str
  model: ModelConfig
  steps: list
  load: Callable[[Sequence[int]], list]


def workdir_source(workdir, name: str | None = None) -> Source:
  """The checkpoints of an sbjax run (or a series imported with ``write_params``)."""
  from sbjax import checkpoint as ckpt  # noqa: PLC0415

  workdir = Path(workdir)
  cfg = ckpt.load_config(workdir)
  steps = ckpt.list_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoints in {workdir}: {ckpt.ckpt_dir(workdir)} has no steps")
  abstract = ckpt.abstract_with_shardings(Model(cfg.model).abstract_params())

  def load(ss):
    import orbax.checkpoint as ocp  # noqa: PLC0415

    mngr = ckpt.make_manager(workdir, read_only=True)
    try:
      return [mngr.restore(s, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract)))
              ["params"] for s in ss]
    finally:
      mngr.close()

  return Source(name or workdir.name, cfg.model, list(steps), load)


def series_source(path, name: str | None = None, dtype: str = "float32") -> Source:
  """A directory of Hugging Face revisions (``step<N>/`` each with config.json and
  safetensors), e.g. a downloaded Pythia series (``sbjax.convert.series``)."""
  from sbjax.convert import series  # noqa: PLC0415

  mc = series.series_config(str(path), dtype=dtype)
  steps = [s for s, _ in series.find_revisions(str(path))]

  def load(ss):  # iter_series yields in step order; return them in the order asked for
    got = dict(series.iter_series(str(path), dtype=dtype, steps=ss))
    return [got[s] for s in ss]

  return Source(name or Path(path).name, mc, steps, load)


# ------------------------------------------------------------------------------ measure
@functools.lru_cache(maxsize=16)
def _forward(mc: ModelConfig):
  """jit(vmap over K checkpoints): (per-sequence NLL sums B, mlp L×B×T×D, ov L×B×T×D)."""
  model = Model(mc)

  def one(p, inputs, targets):
    scores, ex = model.apply(p, inputs, ("mlp", "ov"))
    logp = jax.nn.log_softmax(scores.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return nll.sum(-1), ex["mlp"].astype(jnp.float32), ex["ov"].astype(jnp.float32)

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


@functools.lru_cache(maxsize=16)
def _grads_fn(mc: ModelConfig):
  """jit(vmap over K): the gradients of the mean next-token NLL of the batch w.r.t. each
  block's fc_out_kernel, v_kernel and o_kernel (only those leaves are returned)."""
  model = Model(mc)

  def one(p, inputs, targets):
    def loss(q):
      logp = jax.nn.log_softmax(model.apply(q, inputs).astype(jnp.float32), -1)
      return -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0].mean()
    g = jax.grad(loss)(p)
    keep = lambda b: {"mlp": {"fc_out_kernel": b["mlp"]["fc_out_kernel"]},  # noqa: E731
                      "attn": {k: b["attn"][k] for k in ("v_kernel", "o_kernel")}}
    if "blocks" in g:
      return {"blocks": keep(g["blocks"])}
    return {f"block_{i}": keep(g[f"block_{i}"]) for i in range(mc.n_layers)}

  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


@functools.partial(jax.jit, static_argnums=2)
def _cka(acts, ref, estimators):
  """{estimator: K x L CKA} of acts (K x L x n x D) to ref (L x n x D); one program, so the
  Gram matrices shared by the two estimators are computed once."""
  return {e: M.cka_to_reference_by_layer(acts, ref, e == "debiased") for e in estimators}


def _stack(plist):
  """Stack K params pytrees on a new leading axis (on the host: no per-shape compiles)."""
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *plist)


def _activations(mc, stacked, batch, settings):
  """({(kind, mode): K x L x n x D numpy}, per-checkpoint NLL sum over the batch)."""
  fwd = _forward(mc)
  n, n_all, c = settings.n_sequences, settings.n_all, settings.chunk
  parts = {(k, m): [] for k in KINDS for m in settings.token_modes}
  nll = 0.0
  for c0 in range(0, n, c):
    rows = batch[c0:c0 + c]
    real = rows.shape[0]
    if real < c:  # pad to the static chunk shape (padding rows are dropped below)
      rows = np.concatenate([rows, np.repeat(rows[:1], c - real, 0)])
    s, mlp, ov = jax.device_get(fwd(stacked, rows[:, :-1], rows[:, 1:]))
    nll = nll + np.asarray(s[:, :real], np.float64).sum(1)
    for kind, a in (("mlp", mlp), ("ov", ov)):
      a = a[:, :, :real]  # K x L x b x T x D
      if "last" in settings.token_modes:
        parts[(kind, "last")].append(a[:, :, :, -1])
      if "all" in settings.token_modes and c0 < n_all:
        a = a[:, :, :n_all - c0]
        parts[(kind, "all")].append(a.reshape(a.shape[0], a.shape[1], -1, a.shape[-1]))
  return {k: np.concatenate(v, axis=2) for k, v in parts.items()}, nll


def measure(source: Source, batch: np.ndarray, settings: ConvergenceSettings | None = None,
            *, steps: Iterable[int] | None = None, progress: Callable[[str], None] | None = None):
  """CKA-to-final and PER of every checkpoint of ``source`` on the fixed ``batch``.

  ``batch``: int [>= n_sequences, T+1] token windows (inputs ``[:, :-1]``, next tokens
  ``[:, 1:]``). Returns ``(cka_rows, per_rows, step_rows)``, long tables of dicts:
  cka: step, kind, layer, tokens, estimator, cka; per: step, kind, layer, source
  (weights/gradients), per, r; step: step, eval_loss (mean NLL over the batch).
  """
  settings = settings or ConvergenceSettings()
  mc = source.model
  all_steps = sorted(source.steps)
  steps = sorted(set(all_steps if steps is None else steps) | {all_steps[-1]})
  batch = np.asarray(batch, np.int32)
  if batch.ndim != 2 or batch.shape[0] < settings.n_sequences or batch.shape[1] < 2:
    raise ValueError(f"the fixed batch has shape {batch.shape}; it needs at least "
                     f"n_sequences={settings.n_sequences} rows of T+1 >= 2 tokens")
  if batch.shape[1] - 1 > mc.max_len:
    raise ValueError(f"the fixed batch has {batch.shape[1] - 1} positions but "
                     f"model.max_len={mc.max_len}; pass shorter windows")
  if int(batch.max()) >= mc.vocab_size or int(batch.min()) < 0:
    raise ValueError(f"the fixed batch has token ids outside [0, {mc.vocab_size}) of {source.name}")
  batch = batch[:settings.n_sequences]
  final = all_steps[-1]
  order = [final] + [s for s in steps if s != final]
  k = settings.group_size
  t_len = batch.shape[1] - 1
  ranks = per_ranks(mc, settings)
  ref = None
  cka_rows, per_rows, step_rows = [], [], []
  for g0 in range(0, len(order), k):
    gsteps = order[g0:g0 + k]
    plist = source.load(gsteps)
    pers = {"w": [layer_pers(p, mc, settings) for p in plist]}
    plist += [plist[-1]] * (k - len(gsteps))  # pad: one compiled shape
    host = _stack(plist)
    stacked = jax.device_put(host)
    del plist
    acts, nll = _activations(mc, stacked, batch, settings)
    if ref is None:
      ref = {key: a[0] for key, a in acts.items()}
    cka = {}
    for key, a in acts.items():
      for e, v in jax.device_get(_cka(a, ref[key], settings.estimators)).items():
        cka[(key, e)] = v
    if settings.grad_per:
      g = jax.device_get(_grads_fn(mc)(stacked, batch[:, :-1], batch[:, 1:]))
      pers["g"] = [layer_pers(jax.tree.map(lambda x, j=j: x[j], host), mc, settings,
                              grads=jax.tree.map(lambda x, j=j: x[j], g))
                   for j in range(len(gsteps))]
    for j, s in enumerate(gsteps):
      step_rows.append({"step": int(s), "eval_loss": float(nll[j]) / (batch.shape[0] * t_len)})
      for ((kind, mode), est), v in cka.items():
        for layer in range(mc.n_layers):
          cka_rows.append({"step": int(s), "kind": kind, "layer": layer, "tokens": mode,
                           "estimator": est, "cka": float(v[j, layer])})
      for src in ("w", "g") if settings.grad_per else ("w",):
        for kind in KINDS:
          for layer in range(mc.n_layers):
            per_rows.append({"step": int(s), "kind": kind, "layer": layer,
                             "source": "weights" if src == "w" else "gradients",
                             "per": float(pers[src][j][kind][layer]),
                             "r": ranks[kind if src == "w" else f"grad_{kind}"]})
    del stacked, host, acts
    if progress is not None:
      progress(f"{source.name}: {min(g0 + k, len(order))}/{len(order)} checkpoints")
  key = lambda r: (r["step"],)  # noqa: E731
  return (sorted(cka_rows, key=key), sorted(per_rows, key=key), sorted(step_rows, key=key))


# ------------------------------------------------------------------------------ summaries
def percentile_bands(values_SxL, q: Sequence[float] = PERCENTILES) -> np.ndarray:
  """S x len(q): the q-th percentiles over layers (numpy's linear interpolation)."""
  v = np.asarray(values_SxL, float)
  return np.percentile(v, list(q), axis=1).T


def first_step_reaching(steps, values, frac: float = 0.9) -> int | None:
  """min{s : v(s) >= frac * v(S)}, S = the last step (steps ascending); None if never."""
  steps, v = np.asarray(steps), np.asarray(values, float)
  target = frac * v[-1]
  hit = np.nonzero(v >= target)[0]
  return int(steps[hit[0]]) if hit.size else None


def stable_step(steps, values, frac: float = 0.9) -> int | None:
  """The first step from which v stays >= frac * v(S) up to the end; None if v(S) < it."""
  steps, v = np.asarray(steps), np.asarray(values, float)
  ok = v >= frac * v[-1]
  if not ok[-1]:
    return None
  bad = np.nonzero(~ok)[0]
  return int(steps[bad[-1] + 1]) if bad.size else int(steps[0])


def pearson(x, y) -> float:
  """r = sum (x - mx)(y - my) / sqrt(sum (x - mx)^2 sum (y - my)^2); NaN if undefined."""
  x, y = np.asarray(x, float), np.asarray(y, float)
  ok = np.isfinite(x) & np.isfinite(y)
  if ok.sum() < 2:
    return float("nan")
  x, y = x[ok] - x[ok].mean(), y[ok] - y[ok].mean()
  den = math.sqrt(float((x * x).sum() * (y * y).sum()))
  return float((x * y).sum() / den) if den > 0 else float("nan")


def _ranks(x):
  """Average ranks (1-based; ties get the mean of their positions)."""
  x = np.asarray(x, float)
  order = np.argsort(x, kind="mergesort")
  r = np.empty(len(x), float)
  r[order] = np.arange(1, len(x) + 1)
  for v in np.unique(x):
    tie = x == v
    if tie.sum() > 1:
      r[tie] = r[tie].mean()
  return r


def spearman(x, y) -> float:
  """Spearman's rho = Pearson r of the average ranks (over the finite pairs)."""
  x, y = np.asarray(x, float), np.asarray(y, float)
  ok = np.isfinite(x) & np.isfinite(y)
  return pearson(_ranks(x[ok]), _ranks(y[ok])) if ok.sum() >= 2 else float("nan")


def cka_matrix(cka_rows, kind: str, tokens: str, estimator: str):
  """(steps S, S x L array of c(s, l)) for one kind / token mode / estimator."""
  sel = [r for r in cka_rows if r["kind"] == kind and r["tokens"] == tokens
         and r["estimator"] == estimator]
  if not sel:
    raise ValueError(f"no CKA rows for kind={kind} tokens={tokens} estimator={estimator}")
  steps = sorted({int(r["step"]) for r in sel})
  n_layers = 1 + max(int(r["layer"]) for r in sel)
  idx = {s: i for i, s in enumerate(steps)}
  out = np.full((len(steps), n_layers), np.nan)
  for r in sel:
    out[idx[int(r["step"])], int(r["layer"])] = float(r["cka"])
  return np.asarray(steps), out


def layer_table(cka_rows, per_rows, frac: float = 0.9) -> list[dict]:
  """One row per (kind, layer, tokens, estimator): first/stable step reaching frac of the
  final CKA (also as a fraction of the final step) and the layer's PER (weights, and
  gradients if measured) at the final step and averaged over checkpoints."""
  per = {}
  for r in per_rows:
    per.setdefault((r["source"], r["kind"], int(r["layer"])), []).append(
        (int(r["step"]), float(r["per"]), int(r["r"])))
  combos = sorted({(r["kind"], r["tokens"], r["estimator"]) for r in cka_rows},
                  key=lambda c: (KINDS.index(c[0]), c[1] != "last", c[2] != "biased"))
  out = []
  for kind, tokens, est in combos:
    steps, c = cka_matrix(cka_rows, kind, tokens, est)
    final = int(steps[-1])
    for layer in range(c.shape[1]):
      fs, ss = first_step_reaching(steps, c[:, layer], frac), stable_step(steps, c[:, layer], frac)
      row = {"kind": kind, "layer": layer, "tokens": tokens, "estimator": est,
             "final_step": final, "first_step": fs, "stable_step": ss,
             "first_frac": (fs / final) if fs is not None and final else float("nan"),
             "stable_frac": (ss / final) if ss is not None and final else float("nan")}
      for src in ("weights", "gradients"):
        vals = sorted(per.get((src, kind, layer), []))
        if vals:
          row[f"per_{src}_final"] = vals[-1][1]
          row[f"per_{src}_mean"] = float(np.mean([v[1] for v in vals]))
          row[f"per_{src}_r"] = vals[-1][2]
      out.append(row)
  return out


def correlations(rows: list[dict], x: str = "first_step", ys: Sequence[str] = (
    "per_weights_final", "per_weights_mean", "per_gradients_final")) -> list[dict]:
  """Pearson and Spearman of column ``x`` with each PER column over ``rows`` (n = finite pairs)."""
  out = []
  for y in ys:
    xv = np.array([float(r[x]) if r.get(x) is not None else np.nan for r in rows])
    yv = np.array([float(r[y]) if r.get(y) is not None else np.nan for r in rows])
    if np.isnan(yv).all():
      continue
    n = int((np.isfinite(xv) & np.isfinite(yv)).sum())
    out.append({"x": x, "y": y, "n": n, "pearson": pearson(xv, yv), "spearman": spearman(xv, yv)})
  return out
