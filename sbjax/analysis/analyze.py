"""Checkpoint analysis of one run: one vmapped forward per group of checkpoints.

``analyze_run(workdir, settings)`` measures every checkpoint of ``workdir`` (a training run, or
an imported Hugging Face series: the same layout) with ``measure.measure_checkpoints``: groups
of checkpoints are stacked and ``jax.jit(jax.vmap(model.apply))`` runs over them on a FIXED
sample. Each step is computed once (``OUT/measure.json``, keyed by the settings that change a
number, the config and the CKA reference); a damaged step is set aside. It returns one row per
step (columns: ``COLUMN_DOCS``) and writes ``OUT/metrics.csv``, ``spectrum.npz``,
``metrics.json`` and the figures (``OUT`` = ``settings.out_dir`` or ``WORKDIR/analysis``).

Samples (the same tokens for every checkpoint and every rerun), from the run's data config
(``sbjax.data.make_dataset`` with its train.seq_len T, batch_size B and data_seed):

* evaluation sample: the first ``max(eval_sequences, cka_sequences)`` windows of
  ``concat(ds.eval_batches(...))`` (validation split). The loss (mean over all
  ``eval_sequences * T`` next-token targets), anisotropy and NC4 use its first
  ``eval_sequences`` windows; CKA its first ``cka_sequences``.
* anisotropy positions: ``anisotropy_tokens`` distinct flat positions of the
  ``eval_sequences x T`` grid (``numpy.random.default_rng(seed)``, sorted; all for 0), the
  same for every layer and for ``anisotropy_last``.
* collapse class means and variances: the first ``collapse_sequences`` windows of
  ``concat(ds.train_batch(i) for i = 0, 1, ...)`` (train split), all positions.

The CKA reference is the newest checkpoint that reads (newer damaged ones are set aside
first); it leads the first group and its activations are kept for the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path

import jax
import numpy as np

import sbjax
from sbjax import checkpoint as ckpt
from sbjax.analysis import data_source
from sbjax.analysis import forward as fw
from sbjax.analysis import layerwise
from sbjax.analysis import samples as samples_lib
from sbjax.analysis.measure import Damaged, identity, measure_checkpoints, read_good
from sbjax.analysis.outputs import COLUMN_DOCS, write_outputs  # noqa: F401 - COLUMN_DOCS: public
from sbjax.analysis.rows import GroupResult, step_row, with_gamma
from sbjax.analysis.settings import Settings
from sbjax.convert import integrity
from sbjax.model import Model
from sbjax.paths import upath
from sbjax.progress import Reporter, fmt_time


@dataclasses.dataclass
class _Run:
  workdir: Path
  out: Path
  cfg: object  # sbjax.config.Config, with the data measured on
  steps: list  # the steps to analyse
  data_key: str | None  # content hash of a token file given for the analysis
  data_dir: Path  # where make_dataset keeps tokenizer / token caches
  duplicates: dict | None  # imported series: {step: duplicate_of} (import.json)


def _open_run(workdir, settings: Settings) -> _Run:
  """Check the workdir, its checkpoints, the data, the output directory and the steps."""
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
  # the data measured on: --tokens / --data.* overrides; an import left on planted data is refused
  cfg, data_key, overridden = data_source.effective_config(
      ckpt.load_config(workdir), workdir, settings.tokens, settings.data, settings.needs_data)
  out.mkdir(parents=True, exist_ok=True)
  steps = all_steps
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
  return _Run(workdir, out, cfg, steps, data_key, out / "data" if overridden else workdir, dups)


def _reference(workdir, abstract, damaged: Damaged) -> tuple[int, object]:
  """(step, params) of the newest checkpoint that reads; newer damaged ones are set aside."""
  with ckpt.ParamsReader(workdir, abstract) as reader:
    for s in reversed(ckpt.list_steps(workdir)):
      ckpt.check_params_match(workdir, s, abstract)
      plist, good = read_good(reader, [s], damaged)
      if good:
        return s, plist[0]
  raise damaged.none_left()


def _group_size(settings: Settings, cfg, pbytes: int, n_steps: int) -> int:
  """Checkpoints per vmapped group: ``group_size``, else as many as ``max_group_bytes`` holds
  (params and an activation estimate); every group is padded to it (one compiled shape)."""
  if settings.group_size:
    return settings.group_size
  mc = fw.eval_model_config(cfg.model)
  logits = 0 if mc.loss_chunk else 2 * mc.vocab_size
  rows = max(settings.sample_sequences,
             settings.collapse_sequences if settings.has("collapse") else 0)
  chunk = fw.chunk_size(settings.batch_sequences, rows)  # sequences per forward
  acts = 4 * chunk * cfg.train.seq_len * (
      logits + mc.d_model * (2 + 3 * mc.n_layers)) if settings.needs_data else 0
  return int(max(1, min(n_steps, settings.max_group_bytes // max(pbytes + acts, 1))))


class _Measure:
  """``measure_checkpoints``' function: every metric group of a padded, stacked group."""

  def __init__(self, run: _Run, settings: Settings, sm, gsize: int, ref):
    self.run, self.settings, self.sm, self.gsize = run, settings, sm, gsize
    self.ref_step, self.ref_params = ref
    self.ref = None  # the reference's CKA activations, once computed
    self.weight_fn, self.wdims = (
        fw.cached_weight_metrics(run.cfg.model, fw.weight_settings(settings))
        if any(settings.has(g) for g in ("spectrum", "per", "collapse")) else (None, None))
    self.computed, self.t0 = 0, time.perf_counter()
    self.report = Reporter(f"analyze {run.workdir.name}", len(run.steps), "ckpt",
                           enabled=settings.progress)

  def _stack(self, plist):
    return fw.stack_params(plist + [plist[-1]] * (self.gsize - len(plist)))

  def _eval(self, stacked):
    return fw.eval_pass(self.run.cfg.model, stacked, self.sm, self.settings)

  def _cka(self, acc, first_step) -> dict:
    if self.ref is None:  # the reference leads the first group unless it was measured before
      ref_acc = acc if first_step == self.ref_step else self._eval(self._stack([self.ref_params]))
      self.ref = {k: ref_acc[k][0] for k in ("mlp", "ov")}
    est = "debiased" if self.settings.cka_debiased else "biased"
    return {k: np.asarray(layerwise.cka_to_reference(acc[k], self.ref[k], (est,))[est])
            for k in ("mlp", "ov")}

  def __call__(self, steps, plist) -> list[dict]:
    mc, st, sm = self.run.cfg.model, self.settings, self.sm
    stacked = self._stack(plist)
    g = GroupResult(acc=self._eval(stacked) if sm.ev is not None else None)
    if st.has("cka"):
      g.cka = self._cka(g.acc, steps[0])
    g.htr = fw.train_pass(mc, stacked, sm, st) if sm.tr is not None else None
    g.wm = jax.device_get(self.weight_fn(stacked)) if self.weight_fn is not None else None
    if st.has("anisotropy"):
      g.an = np.asarray(fw.aniso_layers(g.acc["resid"]))
      g.an_last = np.asarray(fw.aniso_last(g.acc["h_sel"]))
    rows = []
    for k, s in enumerate(steps):
      row, top, _ = step_row(s, k, g, sm, st, mc.n_layers, self.wdims)
      rows.append({**row, "spectrum_top": top})
    self.computed += len(steps)
    self.report.advance(len(steps), f"step {steps[-1]}")
    self.report.line(f"{self.computed} checkpoints computed (step {steps[-1]}), elapsed "
                     f"{fmt_time(time.perf_counter() - self.t0)}")
    return rows


def _key(run: _Run, settings: Settings, ref_step) -> str:
  ref = None if ref_step is None else [ref_step, identity(run.workdir, ref_step)]
  text = json.dumps({"settings": settings.cache_fields(), "config": run.cfg.to_dict(),
                     "version": sbjax.__version__, "reference": ref, "data_key": run.data_key},
                    sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:24]


def analyze_run(workdir, settings: Settings | None = None) -> list[dict]:
  """Analyse every checkpoint of ``workdir``; return the rows (also written to the CSV).
  A damaged checkpoint is named, set aside to ``WORKDIR/checkpoints_bad`` and left out; the
  analysis fails only when none is left."""
  settings = settings or Settings()
  t_start = time.perf_counter()
  run = _open_run(workdir, settings)
  sm = samples_lib.build(run.cfg, run.data_dir, settings)  # sized before any checkpoint is read
  abstract = ckpt.abstract_with_shardings(Model(run.cfg.model).abstract_params())
  damaged = Damaged(run.workdir)
  ref = _reference(run.workdir, abstract, damaged) if settings.has("cka") else (None, None)
  run.steps = [s for s in run.steps if s not in damaged.steps]
  pbytes = int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize
                   for x in jax.tree.leaves(abstract)))
  # the CKA reference leads (measured even when not asked for: its row is left out)
  order = run.steps if ref[0] is None else [ref[0]] + [s for s in run.steps if s != ref[0]]
  gsize = _group_size(settings, run.cfg, pbytes, max(len(order), 1))
  fn = _Measure(run, settings, sm, gsize, ref)
  key = _key(run, settings, ref[0])
  try:
    m = measure_checkpoints(run.workdir, fn, key=key, steps=order, chunk=gsize,
                            cache=run.out / "measure.json")
  finally:
    fn.report.close()
  damaged.steps.update({r["step"]: r for r in m.set_aside})
  rows = sorted((dict(r) for r in m.rows if r["step"] in run.steps), key=lambda r: r["step"])
  if not rows:
    raise damaged.none_left()
  steps = [r["step"] for r in rows]
  tops = {r["step"]: r.pop("spectrum_top") for r in rows}
  result = with_gamma(rows, run.cfg, run.workdir)
  if run.duplicates is not None:  # an imported series: which revisions repeat another's weights
    result = [dict(r, duplicate_of=run.duplicates.get(s, "")) for r, s in zip(result, steps)]
  n_failed = sum("n_classes" not in r for r in rows) if settings.has("collapse") else 0
  schedule = {"group_size": gsize, "param_bytes_per_checkpoint": pbytes,
              "computed_checkpoints": fn.computed,
              "seconds": round(time.perf_counter() - t_start, 3)}
  write_outputs(run.out, run.workdir, run.cfg, settings, result, tops, steps, sm.info,
                key, schedule, n_failed, damaged.records())
  return result
