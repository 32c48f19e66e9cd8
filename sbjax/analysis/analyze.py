"""Checkpoint analysis of one run: one vmapped forward per group of checkpoints.

``analyze_run(workdir, settings)`` loads every checkpoint of ``workdir`` (a
training run, or a Hugging Face series imported with ``sbjax.checkpoint.write_params``:
the same layout), stacks them in groups, runs ``jax.jit(jax.vmap(model.apply))``
over the stacked parameters on a FIXED sample, and returns one row dict per
step; it also writes ``OUT/metrics.csv``, ``OUT/spectrum.npz``, ``OUT/metrics.json``
and the figures (``OUT`` = ``settings.out_dir`` or ``WORKDIR/analysis``).

Samples (all fixed: the same tokens for every checkpoint and every rerun)
--------------------------------------------------------------------------
The run's own data config is opened with ``sbjax.data.make_dataset`` (its
train.seq_len T, train.batch_size B and train.data_seed; process 0 of 1).

* evaluation sample: the first ``N_s = max(eval_sequences, cka_sequences)``
  windows of ``concat(ds.eval_batches(ceil(N_s / B)))`` (validation split).
  ``eval_loss``/``eval_acc`` (mean over all ``eval_sequences * T`` next-token
  targets), anisotropy and NC4 use its first ``eval_sequences`` windows; CKA its
  first ``cka_sequences``.
* anisotropy positions: ``anisotropy_tokens`` distinct flat positions of the
  ``eval_sequences x T`` grid drawn with ``numpy.random.default_rng(seed)``
  (sorted; ``anisotropy_positions``), or all of them for 0 / a larger number.
  The same positions are used for every layer and for ``anisotropy_last``.
* collapse (class means and variances): the first ``collapse_sequences`` windows of
  ``concat(ds.train_batch(i) for i = 0, 1, ...)`` (train split), all positions;
  NC4 on all ``eval_sequences * T`` evaluation tokens.

Columns (see ``COLUMN_DOCS``, also written to metrics.json)
-----------------------------------------------------------
``step``; loss: ``eval_loss``, ``eval_acc``; anisotropy: ``anisotropy_layer_<i>``
(residual stream after block i), ``anisotropy_last`` (final-norm features h);
spectrum (of ``heads.head_matrix``): ``head_kl_uniform``, ``head_erank``,
``head_per`` (erank / min(V, d)), ``head_stable_rank``, ``head_sigma_max``,
``head_w_error_<d>``; collapse: the keys of ``sbjax.metrics.collapse_metrics``
unchanged (``nc1_cdnv``, ``nc1_log10_cdnv``, ..., ``nc4_agreement``, ``n_classes``);
cka: ``cka_to_final_mlp_<i>``, ``cka_to_final_attn_<i>`` (attn = the OV-circuit
output, ``collect="ov"``); per: ``per_mlp_<i>``, ``per_ov_<i>``.

PER definitions: ``per_mlp_<i>`` = PER of the singular values of block i's
``fc_out_kernel`` (F x D), with r = len(sigma) = min(F, D) for ``per_mlp_r=0``
(pico-analyze) or the top ``per_mlp_r`` values. ``per_ov_<i>`` = the MEAN OVER
HEADS h of PER(sigma(W_{V,h} W_{O,h})) of each D x D OV matrix (``v_kernel[:, h, :]
@ o_kernel[h]``), with r = head_dim (its rank bound; the authors' notebook r).
"""

from __future__ import annotations

import io
import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import sbjax
from sbjax import checkpoint as ckpt
from sbjax import metrics as M
from sbjax.analysis import forward as fw
from sbjax.analysis import samples as samples_lib
from sbjax.analysis import table
from sbjax.analysis.cache import Cache, digest, mtime_ns
from sbjax.analysis.forward import grouped_apply, make_group_forward, stack_params  # noqa: F401
from sbjax.analysis.settings import Settings
from sbjax.model import Model

log = logging.getLogger("sbjax")

COLUMN_DOCS = {
    "step": "checkpoint step",
    "eval_loss": "mean next-token cross-entropy (nats) on the evaluation sample",
    "eval_acc": "next-token top-1 accuracy on the evaluation sample",
    "anisotropy_layer_<i>": "mean pairwise cosine of the residual stream after block i",
    "anisotropy_last": "mean pairwise cosine of the final-norm features h (head input)",
    "head_kl_uniform": "KL(sigma/sum sigma || uniform) of the head matrix (Godey Fig. 5)",
    "head_erank": "effective rank exp(H(p)) of the head",
    "head_per": "head erank / min(V, d)",
    "head_stable_rank": "||W||_F^2 / sigma_1^2",
    "head_sigma_max": "largest singular value of the head",
    "head_w_error_<d>": "relative Frobenius error of the best rank-d approximation of W",
    "nc1_cdnv ... n_classes": "sbjax.metrics.collapse_metrics keys (train-sample means, "
                              "NC4 on the evaluation sample)",
    "cka_to_final_mlp_<i>": "linear CKA of block i's MLP output vs the final checkpoint's",
    "cka_to_final_attn_<i>": "linear CKA of block i's OV-circuit output vs the final checkpoint's",
    "per_mlp_<i>": "proportional effective rank of block i's fc_out_kernel",
    "per_ov_<i>": "mean over heads of PER(W_V,h W_O,h) with r = head_dim",
}


# ------------------------------------------------------------------------------------ progress
def _fmt_time(s: float) -> str:
  s = int(max(s, 0))
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
  """A one-line progress bar over checkpoints on stderr, with an ETA from computed ones."""

  def __init__(self, total: int, done: int, enabled: bool, name: str, stream=None):
    self.total, self.done, self.enabled, self.name = total, done, enabled, name
    self.stream = stream or sys.stderr
    self.t0 = time.perf_counter()
    self.computed = 0
    self.todo = total - done
    if enabled:
      self._draw("" if not done else f"({done} cached)")

  def _draw(self, note: str):
    frac = self.done / max(self.total, 1)
    bar = "#" * int(24 * frac) + "." * (24 - int(24 * frac))
    el = time.perf_counter() - self.t0
    eta = (el / self.computed * (self.todo - self.computed)) if self.computed else float("nan")
    eta_s = _fmt_time(eta) if math.isfinite(eta) else "?"
    self.stream.write(f"\r[analyze {self.name}] |{bar}| {self.done}/{self.total} ckpts "
                      f"elapsed {_fmt_time(el)} ETA {eta_s} {note}   ")
    self.stream.flush()

  def update(self, n: int, note: str = ""):
    self.done += n
    self.computed += n
    if self.enabled:
      self._draw(note)

  def close(self):
    if self.enabled:
      self.stream.write("\n")
      self.stream.flush()


# ------------------------------------------------------------------------------------ helpers
def _check_out_dir(out: Path) -> None:
  try:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out, prefix=".write_test_"):
      pass
  except OSError as e:
    raise OSError(f"the analysis output directory {out} is not writable ({e.strerror or e}); "
                  "nothing was computed or changed; pass a writable --out_dir") from None


def _param_bytes(abstract) -> int:
  return int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(abstract)))


def _group_size(settings: Settings, cfg, pbytes: int, n_todo: int) -> int:
  if settings.group_size:  # as given: a short last group is padded, not recompiled
    return settings.group_size
  mc = cfg.model
  logits = 0 if mc.loss_chunk else 2 * mc.vocab_size  # chunked: V tiles of ~4 MB only
  acts = 4 * settings.batch_sequences * cfg.train.seq_len * (
      logits + mc.d_model * (2 + 3 * mc.n_layers)) if settings.needs_data else 0
  per_ckpt = pbytes + acts
  return int(max(1, min(n_todo, settings.max_group_bytes // max(per_ckpt, 1))))


def _load_group(mngr, steps, abstract):
  """Restore the params of ``steps`` with one read-only manager (orbax)."""
  import orbax.checkpoint as ocp  # noqa: PLC0415

  out = []
  for s in steps:
    r = mngr.restore(s, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract)))
    out.append(r["params"])
  return out


def _f(x) -> float:
  return float(np.asarray(x))


# ------------------------------------------------------------------------------------ main
def analyze_run(workdir, settings: Settings | None = None, *, dataset=None,
                on_computed: Callable[[list[int]], None] | None = None) -> list[dict]:
  """Analyse every checkpoint of ``workdir``; return the rows (also written to the CSV).

  ``dataset``: an object with ``eval_batches(n)``, ``train_batch(i)``, ``vocab_size`` to
  use instead of the run's own data config. ``on_computed(steps)`` is called after each
  computed group (a hook for tests and experiment drivers).
  """
  settings = settings or Settings()
  t_start = time.perf_counter()
  workdir = Path(workdir)
  if not workdir.is_dir():
    raise FileNotFoundError(f"the workdir {workdir} does not exist")
  if not (workdir / "config.json").exists():
    raise FileNotFoundError(f"{workdir / 'config.json'} not found: {workdir} is not an sbjax "
                            "workdir (a training run or an imported series)")
  all_steps = ckpt.list_steps(workdir)
  if not all_steps:
    raise FileNotFoundError(f"no checkpoints to analyse in {workdir}: "
                            f"{ckpt.ckpt_dir(workdir)} has no step directories")
  out = Path(settings.out_dir) if settings.out_dir else workdir / "analysis"
  _check_out_dir(out)

  cfg = ckpt.load_config(workdir)
  mc = cfg.model
  if mc.vocab_size < 1:
    raise ValueError(f"{workdir}/config.json has model.vocab_size={mc.vocab_size}; "
                     "the analysis needs the resolved vocabulary size")
  steps = list(all_steps)
  if settings.steps:
    missing = sorted(set(settings.steps) - set(all_steps))
    if missing:
      raise ValueError(f"steps {missing} are not checkpointed in {workdir}; available: {all_steps}")
    steps = sorted(set(settings.steps))
  final_step = all_steps[-1]
  n_layers, d = mc.n_layers, mc.d_model
  cka_on = settings.has("cka")

  run_key = digest({"settings": settings.cache_fields(), "config": cfg.to_dict(),
                    "version": sbjax.__version__, "final_step": final_step if cka_on else None,
                    "custom_dataset": None if dataset is None else type(dataset).__name__})
  cache = Cache(out / "cache", run_key, enabled=settings.use_cache)
  keys = {s: cache.step_key(s, mtime_ns(ckpt.ckpt_dir(workdir) / str(s))) for s in steps}
  rows: dict[int, dict] = {}
  tops: dict[int, list | None] = {}
  for s in steps:
    rec = cache.get(s, keys[s])
    if rec is not None:
      rows[s], tops[s] = rec["row"], rec["spectrum_top"]
  todo = [s for s in steps if s not in rows]
  ref = cache.get_reference() if cka_on else None
  if cka_on and ref is None and todo:
    todo = [final_step] + [s for s in todo if s != final_step]  # the reference comes first
  elif cka_on and ref is None:
    todo = [final_step]

  model = Model(mc)
  abstract = ckpt.abstract_with_shardings(model.abstract_params())
  for s in todo:  # checkpoints of another model: refused with a diff (sbjax.checkpoint)
    ckpt.check_params_match(workdir, s, abstract)
  pbytes = _param_bytes(abstract)
  gsize = _group_size(settings, cfg, pbytes, max(len(todo), 1))

  # ---- samples
  sample_info: dict = {}
  ev = tr = None
  if settings.needs_data and todo:
    ds = dataset if dataset is not None else samples_lib.open_dataset(cfg, workdir)
    if ds.vocab_size > mc.vocab_size:
      raise ValueError(f"the data has {ds.vocab_size} tokens but model.vocab_size={mc.vocab_size}")
    ev = samples_lib.eval_sample(ds, settings.sample_sequences)
    if settings.has("collapse"):
      tr = samples_lib.train_sample(ds, settings.collapse_sequences)
  t_len = cfg.train.seq_len if ev is None else ev.shape[1] - 1
  n_eval, n_cka = settings.eval_sequences, settings.cka_sequences
  aniso_pos = samples_lib.anisotropy_positions(n_eval * t_len, settings.anisotropy_tokens,
                                               settings.seed)
  cka_last = settings.cka_tokens == "last"
  sample_info = {
      "data": {"source": cfg.data.source, "data_seed": cfg.train.data_seed,
               "batch_size": cfg.train.batch_size,
               "dataset": "sbjax.data.make_dataset" if dataset is None else type(dataset).__name__,
               "eval_split": "validation", "collapse_split": "train"},
      "seq_len": t_len, "eval_sequences": n_eval, "eval_tokens": n_eval * t_len,
      "sample_sequences_fetched": settings.sample_sequences,
      "anisotropy_tokens": int(aniso_pos.size) if settings.has("anisotropy") else 0,
      "cka_sequences": n_cka if cka_on else 0,
      "cka_samples_per_layer": (n_cka if cka_last else n_cka * t_len) if cka_on else 0,
      "collapse_train_sequences": settings.collapse_sequences if settings.has("collapse") else 0,
      "collapse_train_tokens": settings.collapse_sequences * t_len if settings.has("collapse") else 0,
      "nc4_tokens": n_eval * t_len if settings.has("collapse") else 0,
  }

  chunk = settings.batch_sequences
  def fwd(take, loss_rows):
    return fw.cached_forward(mc, take, loss_rows)

  weight_fn, wdims = (fw.cached_weight_metrics(mc, fw.weight_settings(settings))
                      if any(settings.has(g) for g in ("spectrum", "per", "collapse"))
                      else (None, None))

  def eval_pass(stacked):
    """Loss sums, anisotropy features, NC4 features and CKA activations of a group."""
    need_h = settings.has("anisotropy") or settings.has("collapse")
    acc = {"nll": 0.0, "correct": 0.0, "resid": [], "h_sel": [], "h": [], "mlp": [], "ov": []}
    n_rows = settings.sample_sequences if cka_on else n_eval
    for c0 in range(0, n_rows, chunk):
      rows_ = ev[c0:c0 + chunk]
      real = rows_.shape[0]
      if real < chunk:  # pad to the static chunk shape (padding rows are never read)
        rows_ = np.concatenate([rows_, np.repeat(rows_[:1], chunk - real, 0)])
      nh = max(0, min(n_eval - c0, real))
      nc = max(0, min(n_cka - c0, real)) if cka_on else 0
      take = []
      if need_h and nh:
        take.append(("h", nh, False))
      if settings.has("anisotropy") and nh:
        take.append(("resid", nh, False))
      if nc:
        take += [("mlp", nc, cka_last), ("ov", nc, cka_last)]
      loss_rows = nh if settings.has("loss") else 0
      if not take and not loss_rows:
        continue
      o = jax.device_get(fwd(tuple(take), loss_rows)(stacked, jnp.asarray(rows_[:, :-1]),
                                                     jnp.asarray(rows_[:, 1:])))
      if loss_rows:
        acc["nll"] = acc["nll"] + o["nll"].astype(np.float64)
        acc["correct"] = acc["correct"] + o["correct"].astype(np.float64)
      if nh and need_h:
        h = np.asarray(o["h"], np.float32)  # K×nh×T×D
        kk = h.shape[0]
        lo, hi = c0 * t_len, (c0 + nh) * t_len
        loc = aniso_pos[(aniso_pos >= lo) & (aniso_pos < hi)] - lo
        if settings.has("anisotropy"):
          r = np.asarray(o["resid"], np.float32).reshape(kk, n_layers, nh * t_len, d)
          acc["resid"].append(r[:, :, loc])
          acc["h_sel"].append(h.reshape(kk, nh * t_len, d)[:, loc])
        if settings.has("collapse"):
          acc["h"].append(h)
      if nc:
        for name in ("mlp", "ov"):
          a = np.asarray(o[f"{name}_last" if cka_last else name], np.float32)
          acc[name].append(a.reshape(a.shape[0], n_layers, -1, d))  # K×L×n×D
    for k in ("resid", "h_sel", "mlp", "ov"):
      acc[k] = np.concatenate(acc[k], axis=2 if k in ("resid", "mlp", "ov") else 1) if acc[k] else None
    acc["h"] = np.concatenate(acc["h"], axis=1) if acc["h"] else None
    return acc

  def train_pass(stacked):
    hs = []
    for c0 in range(0, tr.shape[0], chunk):
      rows_ = tr[c0:c0 + chunk]
      real = rows_.shape[0]
      if real < chunk:
        rows_ = np.concatenate([rows_, np.repeat(rows_[:1], chunk - real, 0)])
      o = fwd((("h", real, False),), False)(stacked, jnp.asarray(rows_[:, :-1]),
                                            jnp.asarray(rows_[:, 1:]))
      hs.append(np.asarray(jax.device_get(o["h"]), np.float32))
    return np.concatenate(hs, axis=1)  # K×N×T×D

  prog = Progress(len(steps), len(steps) - len([s for s in todo if s in keys]),
                  settings.progress, workdir.name)
  val_y = ev[:n_eval, 1:].reshape(-1) if ev is not None else None
  tr_y = tr[:, 1:].reshape(-1) if tr is not None else None
  n_coll_failed = 0
  mngr = ckpt.make_manager(workdir, read_only=True) if todo else None
  try:
    for g0 in range(0, len(todo), gsize):
      gsteps = todo[g0:g0 + gsize]
      real = len(gsteps)
      plist = _load_group(mngr, gsteps, abstract)
      plist += [plist[-1]] * (gsize - real)  # pad the last group: no recompilation
      stacked = fw.stack_params(plist)
      del plist
      acc = eval_pass(stacked) if ev is not None else None
      if cka_on and ref is None:  # the final step is todo[0]
        ref = {"mlp": acc["mlp"][0], "ov": acc["ov"][0], "step": np.asarray(final_step)}
        cache.put_reference(ref)
      htr = train_pass(stacked) if tr is not None else None
      wm = jax.device_get(weight_fn(stacked)) if weight_fn is not None else None
      cka_mlp = cka_ov = None
      if cka_on:
        cka_mlp = np.asarray(fw.cka_layers(acc["mlp"], ref["mlp"], settings.cka_debiased))
        cka_ov = np.asarray(fw.cka_layers(acc["ov"], ref["ov"], settings.cka_debiased))
      an = an_last = None
      if settings.has("anisotropy"):
        an = np.asarray(fw.aniso_layers(acc["resid"]))
        an_last = np.asarray(fw.aniso_last(acc["h_sel"]))
      for k, s in enumerate(gsteps):
        row: dict = {"step": int(s)}
        top = None
        if settings.has("loss"):
          row["eval_loss"] = float(acc["nll"][k] / (n_eval * t_len))
          row["eval_acc"] = float(acc["correct"][k] / (n_eval * t_len))
        if an is not None:
          for i in range(n_layers):
            row[f"anisotropy_layer_{i}"] = float(an[k, i])
          row["anisotropy_last"] = float(an_last[k])
        if settings.has("spectrum"):
          row.update(head_kl_uniform=_f(wm["kl"][k]), head_erank=_f(wm["erank"][k]),
                     head_per=_f(wm["per"][k]), head_stable_rank=_f(wm["stable"][k]),
                     head_sigma_max=_f(wm["smax"][k]))
          for j, dd in enumerate(wdims):
            row[f"head_w_error_{int(dd)}"] = _f(wm["w_error"][k][j])
          top = [float(x) for x in np.asarray(wm["top"][k])]
        if settings.has("collapse"):
          w = np.asarray(wm["w"][k], np.float32)
          try:
            cm = M.collapse_metrics(
                htr[k].reshape(-1, d), tr_y, w, acc["h"][k].reshape(-1, d), val_y,
                min_count=settings.min_count, cdnv_exponent=settings.cdnv_exponent,
                weighted_mean=settings.weighted_mean, nc4_search=settings.nc4_search)
            row.update({kk: (float(v) if not isinstance(v, int) else v) for kk, v in cm.items()
                        if np.ndim(v) == 0})
          except ValueError as e:  # e.g. non-finite features of a diverged checkpoint
            n_coll_failed += 1
            log.warning("collapse metrics undefined at step %d: %s", s, e)
        if cka_on:
          for i in range(n_layers):
            row[f"cka_to_final_mlp_{i}"] = float(cka_mlp[k, i])
          for i in range(n_layers):
            row[f"cka_to_final_attn_{i}"] = float(cka_ov[k, i])
        if settings.has("per"):
          for i in range(n_layers):
            row[f"per_mlp_{i}"] = _f(wm["per_mlp"][k][i])
          for i in range(n_layers):
            row[f"per_ov_{i}"] = _f(wm["per_ov"][k][i])
        if s in keys:
          rows[s], tops[s] = row, top
          cache.put(s, keys[s], row, top)
      del stacked
      prog.update(len([s for s in gsteps if s in keys]), f"(step {gsteps[-1]})")
      if on_computed is not None:
        on_computed(list(gsteps))
  finally:
    prog.close()
    if mngr is not None:
      mngr.close()

  result = [rows[s] for s in steps]
  _write_outputs(out, workdir, cfg, settings, result, tops, steps, sample_info, run_key,
                 gsize, pbytes, len(todo), time.perf_counter() - t_start, n_coll_failed)
  return result


def _write_outputs(out, workdir, cfg, settings, rows, tops, steps, sample_info, run_key, gsize,
                   pbytes, n_computed, seconds, n_coll_failed):
  table.write_csv(out / "metrics.csv", rows)
  if settings.has("spectrum"):
    k = settings.spectrum_top
    top = np.array([tops[s] if tops.get(s) is not None else [np.nan] * k for s in steps],
                   np.float32).reshape(len(steps), k)
    buf = io.BytesIO()
    n_sv = min(cfg.model.vocab_size, cfg.model.d_model)
    np.savez(buf, steps=np.asarray(steps, np.int64), normalized_top=top,
             n_singular_values=np.asarray(n_sv))
    table.atomic_write_bytes(out / "spectrum.npz", buf.getvalue())
  mc = cfg.model
  meta = {
      "sbjax_version": sbjax.__version__,
      "workdir": str(workdir),
      "run_name": cfg.name,
      "steps": list(steps),
      "n_checkpoints": len(steps),
      "final_step": ckpt.list_steps(workdir)[-1],
      "settings": settings.to_dict(),
      "cache_key": run_key,
      "samples": sample_info,
      "variants": {
          "anisotropy": "mean pairwise cosine over distinct pairs of the sampled positions "
                        "(sbjax.metrics.anisotropy)",
          "spectrum": "singular values of heads.head_matrix (method=auto); p = sigma / sum sigma",
          "w_error_dims": [int(x) for x in settings.w_error_dims if x <= mc.d_model],
          "collapse": {"min_count": settings.min_count, "cdnv_exponent": settings.cdnv_exponent,
                       "weighted_mean": settings.weighted_mean, "nc4_search": settings.nc4_search,
                       "norm_variant": "norm", "angle_variant": "cos", "gnc2_centered": True,
                       "variance": "two_pass", "ddof": 1,
                       "means_on": "train sample", "nc4_on": "evaluation sample",
                       "failed_steps": n_coll_failed},
          "cka": {"estimator": "debiased HSIC" if settings.cka_debiased else "biased HSIC (linear)",
                  "tokens": settings.cka_tokens, "reference": "final checkpoint",
                  "attn": "OV-circuit output sum_h (x W_V,h + b_V,h) W_O,h, no attention weighting"},
          "per": {"mlp": f"PER(sigma(fc_out_kernel)), r = "
                         f"{settings.per_mlp_r or 'len(sigma) (full)'}",
                  "ov": f"mean over {mc.n_heads} heads of PER(sigma(W_V,h W_O,h)), "
                        f"r = head_dim = {mc.head_dim}"},
      },
      "columns": COLUMN_DOCS,
      "group_size": gsize,
      "param_bytes_per_checkpoint": pbytes,
      "computed_checkpoints": n_computed,
      "seconds": round(seconds, 3),
  }
  table.atomic_write_json(out / "metrics.json", meta)
  if settings.figures:
    from sbjax.analysis import figures  # noqa: PLC0415 - matplotlib only when drawing

    figures.draw_run(out)
