"""Layer convergence (Diehl Martinez, Lesci & Buttery 2024, "Tending Towards Stability").

For every checkpoint s of a run (or of an imported Hugging Face series) and every
layer l, on ONE fixed batch of n sequences (the same tokens for every checkpoint):

* activations: ``mlp`` = the output of block l's MLP down-projection
  (``fc_out``, bias included); ``ov`` = the attention OV circuit
  ``sum_h (LN1(x) W_V,h + b_V,h) W_O,h`` of the block's normalised input, i.e.
  V_h W_{O,h}^T per head (torch layout) summed over heads, with no attention
  weighting and without the output bias (``Model.forward(collect=("ov",))``; heads are
  split per head from the D x H x Dh kernels, and the HF import splits GPT-NeoX's
  fused, head-major ``query_key_value`` per head, so the authors' "last third of the
  fused QKV" quirk does not arise);
* CKA-to-final: c(s, l) = CKA(A_s,l, A_S,l), A = the n x D activations at the last
  position of each sequence (``tokens="last"``, the authors' protocol) or the
  (n_all * T) x D activations at all positions of the first ``all_sequences``
  sequences (``tokens="all"``); S = the final checkpoint. CKA is linear CKA with the
  biased HSIC (``estimator="biased"``, Kornblith et al. 2019, the authors' code) or the
  debiased HSIC (``"debiased"``, Song et al. 2012); see ``sbjax.metrics.linear_cka``.
  c(S, l) = 1 exactly.
* PER (proportional effective rank, ``sbjax.metrics.proportional_effective_rank``): with sigma the
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

PER and CKA-to-final are the run analysis's own implementation
(``sbjax.analysis.layerwise``: ``layer_pers(..., host=True)``, the float64 host path, and
``cka_to_reference``) on the activations of its grouped forward
(``sbjax.analysis.forward.cached_forward``); this module adds the sources, the token
modes, the several estimators and the gradient PER.

Summaries (numpy, ``sbjax.studies.convergence_summary``, re-exported here):
``percentile_bands``, ``first_step_reaching`` (min{s : c(s, l) >= frac * c(S, l)}),
``stable_step``, ``pearson``, ``spearman``, ``cka_matrix``, ``layer_table``,
``correlations``.
"""


from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.analysis import forward as fw
from sbjax.analysis import layerwise
from sbjax.analysis.layerwise import ov_singular_values  # noqa: F401 - public API
from sbjax.config import ModelConfig
from sbjax.convert import series
from sbjax.errors import config_error
from sbjax.model import Model
from sbjax.paths import local_dir, upath
from sbjax.studies.convergence_summary import (  # noqa: F401 - public API
    KINDS,
    PERCENTILES,
    cka_matrix,
    correlations,
    first_step_reaching,
    layer_table,
    pearson,
    percentile_bands,
    spearman,
    stable_step,
)

TOKEN_MODES = ("last", "all")
ESTIMATORS = layerwise.ESTIMATORS


def _err(field, value, allowed) -> ValueError:
  return config_error(field, value, allowed, what="convergence setting")


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
def per_ranks(mc: ModelConfig, settings: ConvergenceSettings) -> dict:
  """The r of each PER (weights: mlp, ov; gradients: grad_mlp, grad_ov)."""
  r_mlp, r_ov = layerwise.default_ranks(mc, settings.per_mlp_r, settings.per_ov_r)
  _, r_gov = layerwise.default_ranks(mc, settings.per_mlp_r, settings.per_ov_r, grads=True)
  return {"mlp": r_mlp, "ov": r_ov, "grad_mlp": r_mlp, "grad_ov": r_gov}


def layer_pers(params, mc: ModelConfig, settings: ConvergenceSettings, grads=None) -> dict:
  """PER per layer of one checkpoint: {"mlp": (L,), "ov": (L,) = mean over heads,
  "ov_heads": (L, H)}; of the gradients when ``grads`` (params-shaped, or holding at least
  each block's fc_out_kernel, v_kernel and o_kernel) is given. The float64 host path of
  ``sbjax.analysis.layerwise.layer_pers`` with the r of ``per_ranks``."""
  return layerwise.layer_pers(params, mc, settings.per_mlp_r, settings.per_ov_r, host=True,
                              grads=grads)


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
  workdir = upath(workdir)  # gs://...: etils.epath
  cfg = ckpt.load_config(workdir)
  steps = ckpt.list_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoints in {workdir}: {ckpt.ckpt_dir(workdir)} has no steps")
  abstract = ckpt.abstract_with_shardings(Model(cfg.model).abstract_params())

  def load(ss):
    return ckpt.restore_params(workdir, ss, abstract)

  return Source(name or workdir.name, cfg.model, list(steps), load)


def series_source(path, name: str | None = None, dtype: str = "float32") -> Source:
  """A directory of Hugging Face revisions (``step<N>/`` each with config.json and
  safetensors), e.g. a downloaded Pythia series (``sbjax.convert.series``); a gs:// one is
  read from one local copy (``sbjax.paths.local_dir``: safetensors are memory-mapped)."""
  name = name or upath(path).name
  path = local_dir(path)
  mc = series.series_config(str(path), dtype=dtype)
  steps = [s for s, _ in series.find_revisions(str(path))]

  def load(ss):  # iter_series yields in step order; return them in the order asked for
    got = dict(series.iter_series(str(path), dtype=dtype, steps=ss))
    return [got[s] for s in ss]

  return Source(name, mc, steps, load)


# ------------------------------------------------------------------------------ measure
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


def _stack(plist):
  """Stack K params pytrees on a new leading axis (on the host: no per-shape compiles)."""
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *plist)


def _activations(mc, stacked, batch, settings):
  """({(kind, mode): K x L x n x D numpy}, per-checkpoint NLL sum over the batch), from the
  analysis's grouped forward (one compiled program for every full chunk)."""
  n_all, c, n_layers, t_len = settings.n_all, settings.chunk, mc.n_layers, batch.shape[1] - 1
  modes = settings.token_modes
  take = tuple((k, c, m == "last") for m in TOKEN_MODES if m in modes for k in KINDS)
  parts = {(k, m): [] for k in KINDS for m in modes}
  nll = 0.0
  for c0, rows, real in fw.padded_chunks(batch, c):
    o = jax.device_get(fw.cached_forward(mc, take, real)(stacked, jnp.asarray(rows[:, :-1]),
                                                         jnp.asarray(rows[:, 1:])))
    nll = nll + np.asarray(o["nll"], np.float64)
    for kind in KINDS:  # padding rows (beyond ``real``) are dropped
      if "last" in modes:
        parts[(kind, "last")].append(layerwise.layer_activations(o, kind, True, n_layers)[:, :, :real])
      if "all" in modes and c0 < n_all:
        a = layerwise.layer_activations(o, kind, False, n_layers)
        parts[(kind, "all")].append(a[:, :, :min(n_all - c0, real) * t_len])
  return {k: np.concatenate(v, axis=2) for k, v in parts.items()}, nll


def _check_batch(batch, settings: ConvergenceSettings, source: Source) -> np.ndarray:
  mc = source.model
  batch = np.asarray(batch, np.int32)
  if batch.ndim != 2 or batch.shape[0] < settings.n_sequences or batch.shape[1] < 2:
    raise ValueError(f"the fixed batch has shape {batch.shape}; it needs at least "
                     f"n_sequences={settings.n_sequences} rows of T+1 >= 2 tokens")
  if batch.shape[1] - 1 > mc.max_len:
    raise ValueError(f"the fixed batch has {batch.shape[1] - 1} positions but "
                     f"model.max_len={mc.max_len}; pass shorter windows")
  if int(batch.max()) >= mc.vocab_size or int(batch.min()) < 0:
    raise ValueError(f"the fixed batch has token ids outside [0, {mc.vocab_size}) of {source.name}")
  return batch[:settings.n_sequences]


def _group_rows(gsteps, mc, nll, n_tokens, cka, pers, ranks, out) -> None:
  """Append the long-table rows of one group to ``out`` = (cka, per, step rows)."""
  cka_rows, per_rows, step_rows = out
  for j, s in enumerate(gsteps):
    step_rows.append({"step": int(s), "eval_loss": float(nll[j]) / n_tokens})
    for ((kind, mode), est), v in cka.items():
      for layer in range(mc.n_layers):
        cka_rows.append({"step": int(s), "kind": kind, "layer": layer, "tokens": mode,
                         "estimator": est, "cka": float(v[j, layer])})
    for src in pers:
      for kind in KINDS:
        for layer in range(mc.n_layers):
          per_rows.append({"step": int(s), "kind": kind, "layer": layer,
                           "source": "weights" if src == "w" else "gradients",
                           "per": float(pers[src][j][kind][layer]),
                           "r": ranks[kind if src == "w" else f"grad_{kind}"]})


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
  batch = _check_batch(batch, settings, source)
  final = all_steps[-1]
  order = [final] + [s for s in steps if s != final]
  k = settings.group_size
  ranks = per_ranks(mc, settings)
  ref = None
  out = ([], [], [])
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
      for e, v in jax.device_get(layerwise.cka_to_reference(a, ref[key], settings.estimators)).items():
        cka[(key, e)] = v
    if settings.grad_per:
      g = jax.device_get(_grads_fn(mc)(stacked, batch[:, :-1], batch[:, 1:]))
      pers["g"] = [layer_pers(jax.tree.map(lambda x, j=j: x[j], host), mc, settings,
                              grads=jax.tree.map(lambda x, j=j: x[j], g))
                   for j in range(len(gsteps))]
    _group_rows(gsteps, mc, nll, batch.shape[0] * (batch.shape[1] - 1), cka, pers, ranks, out)
    del stacked, host, acts
    if progress is not None:
      progress(f"{source.name}: {min(g0 + k, len(order))}/{len(order)} checkpoints")
  key = lambda r: (r["step"],)  # noqa: E731
  return tuple(sorted(rows, key=key) for rows in out)


# ------------------------------------------------------------------------------ PER variants
def per_variant_ranks(mc: ModelConfig) -> dict:
  """{variant: (r_mlp, r_ov)}: ``full`` = every singular value (MLP: min(F, D); OV: D, so
  the head_dim nonzero ones over D, a fixed rescale of the head_dim PER within a model) and
  ``head_dim`` = the top head_dim for MLP and OV (the authors' notebook convention)."""
  return {"full": (min(mc.ff_dim, mc.d_model), mc.d_model),
          "head_dim": (min(mc.head_dim, mc.ff_dim, mc.d_model), mc.head_dim)}


def per_variants(source: Source, steps: Iterable[int] | None = None, group: int = 8) -> list:
  """PER of the weights under both conventions (``per_variant_ranks``) at every checkpoint
  (float64 host spectra, ``sbjax.analysis.layerwise.layer_pers``); no forward pass. Rows:
  step, kind, layer, variant, per, r."""
  mc = source.model
  steps = sorted(source.steps if steps is None else steps)
  ranks = per_variant_ranks(mc)
  rows = []
  for g0 in range(0, len(steps), group):
    ss = steps[g0:g0 + group]
    for s, p in zip(ss, source.load(ss)):
      for variant, (rm, ro) in ranks.items():
        pers = layerwise.layer_pers(p, mc, rm, ro, host=True)
        for kind in KINDS:
          r = rm if kind == "mlp" else ro
          rows += [{"step": int(s), "kind": kind, "layer": layer, "variant": variant,
                    "per": float(pers[kind][layer]), "r": int(r)}
                   for layer in range(mc.n_layers)]
  return rows
