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
PER and CKA-to-final are ``sbjax.analysis.layerwise`` (shared with the studies).

Pieces: ``samples`` (the fixed samples), ``forward`` (the grouped forward and its passes,
the weight metrics), ``layerwise`` (PER, CKA to the reference), ``rows`` (one row per
checkpoint), ``cache`` (the resumable per-step cache), ``damaged`` (a damaged checkpoint
named, set aside to WORKDIR/checkpoints_bad and left out), ``outputs`` (CSV, npz, JSON,
figures), ``progress`` (tqdm bar or log lines); ``analyze_run`` composes them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import jax
import numpy as np

import sbjax
from sbjax import checkpoint as ckpt
from sbjax.analysis import data_source, evals
from sbjax.analysis import forward as fw
from sbjax.analysis import layerwise
from sbjax.analysis import samples as samples_lib
from sbjax.analysis.cache import Cache, digest, mtime_ns
from sbjax.analysis.damaged import Damaged, read_good, settle_reference
from sbjax.analysis.outputs import COLUMN_DOCS, write_outputs  # noqa: F401 - COLUMN_DOCS: public
from sbjax.analysis.progress import CheckpointProgress
from sbjax.analysis.rows import GroupResult, step_row, with_gamma
from sbjax.analysis.samples import Samples
from sbjax.analysis.settings import Settings
from sbjax.atomic import is_local
from sbjax.convert import integrity
from sbjax.model import Model
from sbjax.paths import upath


# ------------------------------------------------------------------------------------ the run
@dataclasses.dataclass
class _Run:
  workdir: Path
  out: Path
  cfg: object  # sbjax.config.Config
  steps: list  # the steps to analyse
  final_step: int  # the last checkpoint (the CKA reference)
  data_key: str | None = None  # content hash of a token file given for the analysis
  data_dir: Path | None = None  # where make_dataset keeps tokenizer / token caches
  duplicates: dict | None = None  # imported series: {step: duplicate_of} (import.json)


def _check_out_dir(out: Path) -> None:
  try:
    out.mkdir(parents=True, exist_ok=True)
    if is_local(out):
      with tempfile.NamedTemporaryFile(dir=out, prefix=".write_test_"):
        pass
    else:  # an object store: write and delete a probe object
      probe = out / f".write_test_{os.getpid()}"
      probe.write_bytes(b"")
      probe.unlink()
  except OSError as e:
    raise OSError(f"the analysis output directory {out} is not writable ({e.strerror or e}); "
                  "nothing was computed or changed; pass a writable --out_dir") from None


def _open_run(workdir, settings: Settings) -> _Run:
  """Check the workdir, its checkpoints, the output directory and the steps asked for."""
  workdir = upath(workdir)
  if not workdir.is_dir():
    raise FileNotFoundError(f"the workdir {workdir} does not exist")
  if not (workdir / "config.json").exists():
    raise FileNotFoundError(f"{workdir / 'config.json'} not found: {workdir} is not an sbjax "
                            "workdir (a training run or an imported series)")
  all_steps = ckpt.list_steps(workdir)
  if not all_steps:
    raise FileNotFoundError(f"no checkpoints to analyse in {workdir}: "
                            f"{ckpt.ckpt_dir(workdir)} has no step directories")
  out = upath(settings.out_dir) if settings.out_dir else workdir / "analysis"
  cfg = ckpt.load_config(workdir)
  # the data measured on: --tokens / --data.* overrides; an import left on planted data is refused
  cfg, data_key, overridden = data_source.effective_config(cfg, workdir, settings.tokens,
                                                           settings.data, settings.needs_data)
  _check_out_dir(out)
  if cfg.model.vocab_size < 1:
    raise ValueError(f"{workdir}/config.json has model.vocab_size={cfg.model.vocab_size}; "
                     "the analysis needs the resolved vocabulary size")
  steps = list(all_steps)
  if settings.steps:
    missing = sorted(set(settings.steps) - set(all_steps))
    if missing:
      raise ValueError(f"steps {missing} are not checkpointed in {workdir}; available: {all_steps}")
    steps = sorted(set(settings.steps))
  dups = integrity.duplicates_of(workdir) if data_source.is_import(workdir) else None
  bad = {s: d for s, d in (dups or {}).items() if s in steps}
  if bad and not settings.allow_duplicates:
    raise ValueError(
        f"{workdir}: revision(s) {sorted(bad)} hold the same weights as step(s) "
        f"{[bad[s] for s in sorted(bad)]} (import.json duplicate_of; e.g. a step branch that "
        "holds another step's weights); their rows would repeat that step's numbers (CKA to "
        "the final 1.0). Nothing was analysed. Pass --allow_duplicates to analyse them anyway "
        "(the CSV column duplicate_of marks them), or leave them out with --steps")
  return _Run(workdir, out, cfg, steps, all_steps[-1], data_key,
              out / "data" if overridden else workdir, dups)


def open_run(workdir, settings: Settings) -> _Run:
  """The checks of ``analyze_run`` for other drivers of a checkpoint pass (the collapse
  series): the workdir, the data measured on (``data_source``: an import on planted data is
  refused), the output directory, the steps and the duplicated revisions (refused unless
  ``settings.allow_duplicates``). Returns the run (``.cfg`` effective, ``.steps``,
  ``.duplicates``, ``.data_dir``)."""
  return _open_run(workdir, settings)


# ------------------------------------------------------------------------------------ the cache
@dataclasses.dataclass
class _Plan:
  run_key: str
  cache: Cache
  keys: dict  # step -> cache key, for the steps asked for
  rows: dict  # step -> row (cached so far)
  tops: dict  # step -> normalized top spectrum or None
  todo: list  # steps to compute, the CKA reference first
  ref: dict | None  # the CKA reference activations (cached), or None


def _plan(run: _Run, settings: Settings, dataset) -> _Plan:
  """The cached rows and the steps left to compute (the final step first when the CKA
  reference is not cached)."""
  cka_on = settings.has("cka")
  run_key = digest({"settings": settings.cache_fields(), "config": run.cfg.to_dict(),
                    "version": sbjax.__version__,
                    "final_step": run.final_step if cka_on else None,
                    "custom_dataset": None if dataset is None else type(dataset).__name__,
                    **({"data_key": run.data_key} if run.data_key else {})})
  cache = Cache(run.out / "cache", run_key, enabled=settings.use_cache)
  keys = {s: cache.step_key(s, mtime_ns(ckpt.ckpt_dir(run.workdir) / str(s))) for s in run.steps}
  rows, tops = {}, {}
  for s in run.steps:
    rec = cache.get(s, keys[s])
    if rec is not None:
      rows[s], tops[s] = rec["row"], rec["spectrum_top"]
  todo = [s for s in run.steps if s not in rows]
  ref = cache.get_reference() if cka_on else None
  if cka_on and ref is None and todo:
    todo = [run.final_step] + [s for s in todo if s != run.final_step]  # the reference first
  elif cka_on and ref is None:
    todo = [run.final_step]
  return _Plan(run_key, cache, keys, rows, tops, todo, ref)


# ------------------------------------------------------------------------------------ compute
def _param_bytes(abstract) -> int:
  return int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(abstract)))


def _group_size(settings: Settings, cfg, pbytes: int, n_todo: int) -> int:
  if settings.group_size:  # as given: a short last group is padded, not recompiled
    return settings.group_size
  mc = fw.eval_model_config(cfg.model)
  logits = 0 if mc.loss_chunk else 2 * mc.vocab_size  # chunked: V tiles of ~4 MB only
  rows = max(settings.sample_sequences,
             settings.collapse_sequences if settings.has("collapse") else 0)
  chunk = fw.chunk_size(settings.batch_sequences, rows)  # sequences per forward
  acts = 4 * chunk * cfg.train.seq_len * (
      logits + mc.d_model * (2 + 3 * mc.n_layers)) if settings.needs_data else 0
  per_ckpt = pbytes + acts
  return int(max(1, min(n_todo, settings.max_group_bytes // max(per_ckpt, 1))))


def _weight_fn(mc, settings: Settings):
  if any(settings.has(g) for g in ("spectrum", "per", "collapse")):
    return fw.cached_weight_metrics(mc, fw.weight_settings(settings))
  return None, None


def _compute_group(mc, stacked, sm: Samples, settings: Settings, weight_fn, plan: _Plan,
                   final_step: int) -> GroupResult:
  """Every metric group of one stacked group; stores the CKA reference when it is the
  first group of an uncached reference (its first checkpoint is the final step)."""
  g = GroupResult()
  g.acc = fw.eval_pass(mc, stacked, sm, settings) if sm.ev is not None else None
  if settings.has("cka"):
    if plan.ref is None:  # the final step is todo[0]
      plan.ref = {"mlp": g.acc["mlp"][0], "ov": g.acc["ov"][0], "step": np.asarray(final_step)}
      plan.cache.put_reference(plan.ref)
    est = ("debiased" if settings.cka_debiased else "biased",)
    g.cka = {k: np.asarray(layerwise.cka_to_reference(g.acc[k], plan.ref[k], est)[est[0]])
             for k in ("mlp", "ov")}
  g.htr = fw.train_pass(mc, stacked, sm, settings) if sm.tr is not None else None
  g.wm = jax.device_get(weight_fn(stacked)) if weight_fn is not None else None
  if settings.has("anisotropy"):
    g.an = np.asarray(fw.aniso_layers(g.acc["resid"]))
    g.an_last = np.asarray(fw.aniso_last(g.acc["h_sel"]))
  return g


def _analyse_groups(run: _Run, plan: _Plan, sm: Samples, settings: Settings, gsize: int,
                    abstract, on_computed, damaged: Damaged) -> int:
  """Load, compute and cache every group of ``plan.todo``; returns the number of
  checkpoints whose collapse metrics were undefined. A step that fails to read is set aside
  (``damaged``) and left out of its group."""
  mc = run.cfg.model
  weight_fn, wdims = _weight_fn(mc, settings)
  prog = CheckpointProgress(len(run.steps), len(run.steps) - len([s for s in plan.todo
                                                                   if s in plan.keys]),
                            settings.progress, run.workdir.name)
  n_failed, newest = 0, -1
  reader = ckpt.ParamsReader(run.workdir, abstract) if plan.todo else None
  try:
    for g0 in range(0, len(plan.todo), gsize):
      asked = plan.todo[g0:g0 + gsize]
      plist, gsteps = read_good(reader, asked, damaged)
      if not gsteps:
        prog.update(len([s for s in asked if s in plan.keys]), f"(step {asked[-1]} damaged)")
        continue
      if settings.has("cka") and plan.ref is None and gsteps[0] != run.final_step:
        raise damaged.none_left()  # the reference read before (settle_reference), not now
      plist += [plist[-1]] * (gsize - len(gsteps))  # pad the last group: no recompilation
      stacked = fw.stack_params(plist)
      del plist
      g = _compute_group(mc, stacked, sm, settings, weight_fn, plan, run.final_step)
      del stacked
      for k, s in enumerate(gsteps):
        row, top, failed = step_row(s, k, g, sm, settings, mc.n_layers, wdims)
        n_failed += failed
        if s in plan.keys:
          plan.rows[s], plan.tops[s] = row, top
          plan.cache.put(s, plan.keys[s], row, top)
      newest = max(newest, *gsteps)  # the reference (the last step) may have gone first
      last = g0 + gsize >= len(plan.todo)
      prog.update(len([s for s in asked if s in plan.keys]),
                  f"(step {newest if last else gsteps[-1]})")
      if on_computed is not None:
        on_computed(list(gsteps))
  finally:
    prog.close()
    if reader is not None:
      reader.close()
  return n_failed


def _settle_reference(run: _Run, abstract, damaged: Damaged) -> None:
  """The CKA reference is the newest step that reads (``sbjax.analysis.damaged``)."""
  ref = settle_reference(run.workdir, abstract, ckpt.list_steps(run.workdir), damaged)
  run.steps = [s for s in run.steps if s not in damaged.steps]
  if ref is None or not run.steps:
    raise damaged.none_left()
  run.final_step = ref


# ------------------------------------------------------------------------------------ main
def analyze_run(workdir, settings: Settings | None = None, *, dataset=None,
                on_computed: Callable[[list[int]], None] | None = None) -> list[dict]:
  """Analyse every checkpoint of ``workdir``; return the rows (also written to the CSV).
  A damaged checkpoint is named, set aside and left out (``sbjax.analysis.damaged``).

  ``dataset``: an object with ``eval_batches(n)``, ``train_batch(i)``, ``vocab_size`` to
  use instead of the run's own data config. ``on_computed(steps)`` is called after each
  computed group (a hook for tests and experiment drivers).
  """
  settings = settings or Settings()
  t_start = time.perf_counter()
  run = _open_run(workdir, settings)
  joined = evals.read_all(settings.join_evals) if settings.join_evals else None  # read first
  abstract = ckpt.abstract_with_shardings(Model(run.cfg.model).abstract_params())
  damaged = Damaged(run.workdir)
  if settings.has("cka"):  # the reference first: a damaged final step is set aside
    _settle_reference(run, abstract, damaged)
  plan = _plan(run, settings, dataset)
  for s in plan.todo:  # checkpoints of another model: refused with a diff (sbjax.checkpoint)
    ckpt.check_params_match(run.workdir, s, abstract)
  pbytes = _param_bytes(abstract)
  gsize = _group_size(settings, run.cfg, pbytes, max(len(plan.todo), 1))
  sm = samples_lib.build(run.cfg, run.data_dir or run.workdir, settings, dataset,
                         needed=bool(plan.todo))
  n_failed = _analyse_groups(run, plan, sm, settings, gsize, abstract, on_computed, damaged)
  run.steps = [s for s in run.steps if s not in damaged.steps]
  if not run.steps:
    raise damaged.none_left()
  result = with_gamma([plan.rows[s] for s in run.steps], run.cfg, run.workdir)
  if run.duplicates is not None:  # an imported series: which revisions repeat another's weights
    result = [dict(r, duplicate_of="" if run.duplicates.get(s) is None else run.duplicates[s])
              for r, s in zip(result, run.steps)]
  if joined is not None:  # downstream evaluations by step (sbjax.analysis.evals)
    result = evals.join(result, joined)
  schedule = {"group_size": gsize, "param_bytes_per_checkpoint": pbytes,
              "computed_checkpoints": len(plan.todo),
              "seconds": round(time.perf_counter() - t_start, 3)}
  write_outputs(run.out, run.workdir, run.cfg, settings, result, plan.tops, run.steps, sm.info,
                plan.run_key, schedule, n_failed, damaged.records())
  return result
