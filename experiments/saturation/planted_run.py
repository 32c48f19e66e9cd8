"""Run the planted arms: compute the exact floors of each language (before its first group
trains, so that a budget clock has spent them), train (or skip) every arm on one fresh-token
stream, measure every checkpoint on the fixed validation windows, write the CSVs.

Outputs in OUT: ``runs/<arm>/`` (workdirs, with ``planted_windows.npz``: steps, L[K, W], and
``planted_measure.json``: each checkpoint's row and L[s, ·], ``planted_measure.measure_arm``),
``planted_checkpoints.csv`` (one row per arm and checkpoint), ``planted_arms.csv`` (the
per-arm readout, ``planted_measure.arm_summary``, with the arm's seed, vocab and zipf), the
floors ``planted_floor.csv`` (the preset's language) and ``planted_floor<lang_tag>.csv`` (an
arm's own language, ``Arm.lang``), ``planted_meta.json`` (preset, language, languages,
account, timings, the budget clock's estimates and measurement rate; ``runs``: one record per
call of ``run_planted`` in this folder, so a rerun after a budget stop keeps the stop's
record: ``experiments.shared.with_history``), written by a ``CallRecord`` when the call starts,
after every group, at each time estimate and at its end, so a call cut off by ``timeout``
(SIGKILL) still leaves its start, its estimates and what it finished. An arm with its own
language or seed gets its own dataset and windows.

With ``Knobs.population`` (the device presets) the arms of one shape (d, dtype, language)
train as ONE run of N members (``sbjax.train.train``: one vmapped step; λ and seed vary), each
member in its own ``runs/<arm>/`` workdir; members with another data seed share the language
(``_reseeded``: built once, 11 s and 0.9 GB at V 4096). With ``Knobs.budget_s`` a population's
time is projected after ``estimate_at`` steps and the run stops cleanly, resumable, before it
would overrun (``planted_budget``; the projection includes the population's measurement,
projected from a probe of it: up to 3 of its first member's finalized checkpoints measured
at the estimate, into that member's measurement cache, ``_prober``; ``PROBE`` False leaves
the probe out, and the projection falls back to the slowest rate measured so far in the
call; a probe that meets a checkpoint it cannot read warns and falls back the same way); the
floors of a population's language, when computed for it, are spent before its start check,
and a call whose floors leave none of the budget stops there (they are kept in OUT for the
rerun); the finished populations are measured and written first, and planted_meta.json names
the stop and the arms not run (its top-level fields describe the latest call; its ``runs``
list keeps every earlier call's stop, populations, estimates and timings). A checkpoint is measured once: a later call reads its
row from the member's ``planted_measure.json`` (while its key and the checkpoint's identity
match), so a resumed call measures only what no call has measured; ``timings[pop]`` says how
many member-checkpoints were ``measured`` and how many read from the cache (``cached``), and
the budget clock learns its rate from the measured ones only. The probed checkpoints are
among the ``cached`` ones when the population is measured after training.

A damaged member-checkpoint met by the measurement after training is set aside (moved to
the member's ``checkpoints_bad/``, one warning line; ``planted_measure``) and the member's
other checkpoints are measured: planted_arms.csv's row says which steps were left out and
why (``set_aside``) and how many checkpoints its statistics use (``checkpoints_used`` of
``checkpoints_saved``, ``last_step``), planted_meta.json keeps the records (``set_aside``, by
arm) and the members with no checkpoint left (``excluded``: no row, not in the account),
and the report says so. A rerun of a finished population that lost a member's final
checkpoint this way resumes its training from the newest step every member restores and
saves the final step again (``lost_final``: bit for bit the same parameters; the members'
newer steps are moved aside by the restore and measured again); other set-aside steps stay
out, reported, and a member with no checkpoint left is not retrained.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import planted_measure as pm
from .windows import validation_windows
from .planted_floor import floors as _floors
from .planted_budget import Clock, OverBudget, Watch
from .planted_presets import arm_config, arm_name, get_planted_preset, knobs_record, lang_tag
from .. import shared
from ..shared import RunsProgress, upath, write_rows
from sbjax.analysis.table import atomic_write_bytes
from sbjax.data import make_dataset
from sbjax.data.dataset import StreamingPlanted
from sbjax.checkpoint import checkpoint_steps, list_steps
from sbjax.data.planted_tail import rarest_token, types_below
from sbjax.train import read_metrics, train, train_once
from sbjax.train.done import finished, mark_finished
from sbjax.train.lock import workdir_locks

META = "planted_meta.json"
PROBE = True  # probe each population's measurement at its time estimate (planted_budget)


def _save_windows(path: Path, steps, losses) -> None:
  buf = io.BytesIO()
  np.savez(buf, steps=np.asarray(steps, np.int64), expected_loss_KxW=losses)
  atomic_write_bytes(path, buf.getvalue())


def _reseeded(ds: StreamingPlanted, seed: int) -> StreamingPlanted:
  """The same planted dataset (language, validation tokens) with another data seed: batches
  on demand are pure in (planted seed, data seed, i), read at call time; the per-seed caches
  (device tables, window permutations) start empty."""
  new = copy.copy(ds)
  new.seed = int(seed)
  new._perm = functools.lru_cache(maxsize=4)(new._permutation)
  for attr in ("_tables", "_on_device"):
    if hasattr(new, attr):
      setattr(new, attr, None)
  return new


class _Languages:
  """Per arm language (``Arm.lang``): its dataset per data seed, its fixed validation windows
  (independent of the data seed) and its floors, each built once, when first needed (the
  floors before the language's first group trains: ``floors_for``)."""

  def __init__(self, p, out: Path):
    self.p, self.out, self.ds, self.windows, self.floors, self.floor_s = p, out, {}, {}, {}, 0.0

  def dataset(self, arm, cfg):
    key = (arm.lang, cfg.train.data_seed)
    built = next((d for (lang, _), d in self.ds.items() if lang == arm.lang), None)
    if key not in self.ds and isinstance(built, StreamingPlanted):
      self.ds[key] = _reseeded(built, cfg.train.data_seed)  # the language is built once
    elif key not in self.ds:
      self.ds[key] = make_dataset(cfg.data, seq_len=cfg.train.seq_len,
                                  global_batch_size=cfg.train.batch_size,
                                  seed=cfg.train.data_seed, workdir=None, process_index=0,
                                  process_count=1)
    return self.ds[key]

  def language(self, arm, cfg):
    """(dataset, language, validation windows) of the arm."""
    ds = self.dataset(arm, cfg)
    if arm.lang not in self.windows:
      self.windows[arm.lang] = validation_windows(ds, self.p.knobs.val_windows)
    return ds, ds.planted, self.windows[arm.lang]

  def floor(self, arm, lang) -> dict:
    """The arm's planted_floor row (the language's floors fitted at its first arm's end)."""
    if arm.lang not in self.floors:
      t = time.perf_counter()
      ranks = {a.d for a in self.p.knobs.arms if a.lang == arm.lang}
      self.floors[arm.lang] = _floors(lang, self.p, ranks, self.out, lang_tag(arm.lang))
      self.floor_s += time.perf_counter() - t
    return self.floors[arm.lang][arm.d]

  def floors_for(self, group) -> tuple[float, str] | None:
    """Compute the floors of the ``group``'s languages not computed yet in this call (before
    its training, so that the budget clock has spent them: ``planted_budget``): (their
    seconds, the files that keep them), None when there were none to compute."""
    new = {a.lang for a, _ in group} - set(self.floors)
    if not new:
      return None
    t = self.floor_s
    for arm, cfg in group:
      if arm.lang in new and arm.lang not in self.floors:
        self.floor(arm, self.language(arm, cfg)[1])
    return self.floor_s - t, ", ".join(f"planted_floor{lang_tag(g)}.csv" for g in sorted(new))


def _arm_rows(arm, cfg, wd: Path, windows, lang, fl: dict,
             knobs) -> tuple[dict | None, list[dict], pm.Measured]:
  """(the arm's planted_arms.csv row, None when no checkpoint of it reads; its
  planted_checkpoints.csv rows; its measurement, ``planted_measure.Measured``: how many of
  its checkpoints were measured in this call, the others read from its cache, and the steps
  set aside) after training. The row says which checkpoints its statistics use: ``set_aside``
  (the steps left out and why, or "none"), ``checkpoints_used`` of ``checkpoints_saved`` (the
  schedule's) and ``last_step`` (the step of its final-* columns)."""
  m = pm.measure_arm(wd, windows, lang)
  if not m.rows:  # every checkpoint set aside: no statistic (planted_meta.json's excluded)
    return None, [], m
  _save_windows(wd / "planted_windows.npz", [r["step"] for r in m.rows], m.losses)
  train_recs = [r for r in read_metrics(wd) if "loss" in r]
  who = {"arm": arm.name, "seed": arm.seed, "vocab": lang.vocab, "zipf": lang.zipf}
  summary = pm.arm_summary(m.rows, m.losses, train_recs, cfg, knobs, float(fl["floor"]),
                           float(fl["H"]))
  aside = [r for r in m.set_aside if not r["saved_again"]]
  used = {"checkpoints_used": len(m.rows), "checkpoints_saved": len(checkpoint_steps(cfg.train)),
          "last_step": m.rows[-1]["step"],
          "set_aside": "; ".join(f"step {r['step']} ({r['reason']})" for r in aside) or "none"}
  ck = [{"arm": arm.name, "d": arm.d, "weight_decay": arm.weight_decay, "dtype": arm.dtype,
         "seed": arm.seed, **r} for r in m.rows]
  return {**summary, **who, **used}, ck, m


def groups(p, cfgs) -> list[tuple[str, list]]:
  """[(name, [(arm, cfg), ...])]: each arm alone, or with ``Knobs.population`` the arms of one
  shape (d, dtype, language) together as one population (they differ in λ and seed), in the
  order their first arm appears."""
  if not p.knobs.population:
    return [(a.name, [(a, c)]) for a, c in cfgs]
  out: dict = {}
  for a, c in cfgs:
    key = arm_name(a.d, 0.0, a.dtype, 0, a.lang).replace("-wd0", "")
    out.setdefault(key, []).append((a, c))
  return list(out.items())


def population_plan(preset) -> list[tuple[str, list, list]]:
  """[(name, member Configs, datasets)] of a preset's groups, as ``run_planted`` trains them
  (one dataset when the members share a data seed); for ``benchmarks/step_timing.py``."""
  p = get_planted_preset(preset)
  cfgs = [(a, arm_config(p, a)) for a in p.knobs.arms]
  langs = _Languages(p, Path("."))  # (floors are not asked for here)
  return [(name, [c for _, c in g], _datasets(g, langs)) for name, g in groups(p, cfgs)]


def _datasets(group: list, langs) -> list:
  """The datasets of a group's members: one when they share a data seed (one batch for every
  member), else one per member (each draws its own batches)."""
  dss = [langs.language(a, c)[0] for a, c in group]
  return dss[:1] if len({d.seed for d in dss}) == 1 else dss


def _prober(group: list, wds: list, langs):
  """The budget hook's probe of a population's measurement (``planted_measure.probe_arm``
  on its first member, with that member's windows and language); None with PROBE False."""
  (arm, cfg), wd = group[0], wds[0]

  def probe() -> pm.Probe:
    _, lang, windows = langs.language(arm, cfg)
    return pm.probe_arm(wd, windows, lang)

  return probe if PROBE else None


def _train_population(name: str, group: list, wds: list, dss: list, clock,
                      probe=None, floors=None) -> None:
  """Train (or resume) one population with its time estimate (and ``probe`` of its
  measurement) and budget stop (``planted_budget``; ``floors``: the seconds and files of the
  floors computed for it just before, ``_Languages.floors_for``), then mark every member
  finished (``sbjax.train.done``)."""
  cfgs = [c for _, c in group]
  tc = cfgs[0].train
  member_tokens = tc.batch_size * tc.seq_len * len(cfgs)
  hooks = []
  if clock is not None:  # its measurement: every checkpoint of every member (before the
    # start, an earlier call's probes are not counted: at most 3 each)
    if floors is not None:
      clock.after_floors(name, *floors)
    measures = len(checkpoint_steps(tc)) * len(cfgs)
    clock.check_start(name, (tc.steps - min(_steps_done(w) for w in wds)) * member_tokens,
                      measures)
    hooks = [Watch(clock, name, member_tokens, measures, len(cfgs), probe)]
  one = len(cfgs) == 1
  with workdir_locks(wds):  # the run and its DONE marks
    sums = train(cfgs[0] if one else cfgs, wds[0] if one else wds,
                 dataset=dss[0] if len(dss) == 1 else dss, quiet=True, hooks=hooks)
    for cfg, d, s in zip(cfgs, wds, [sums] if one else sums):
      if s.get("step") != cfg.train.steps or "eval_loss" not in s:
        raise RuntimeError(f"run {d} stopped at step {s.get('step')} of {cfg.train.steps}")
      mark_finished(d, s, cfg.to_dict())


def _steps_done(wd: Path) -> int:
  steps = list_steps(wd) if wd.exists() else []
  return steps[-1] if steps else 0


def lost_final(group: list, wds: list) -> bool:
  """True when a member of a finished group lost its final checkpoint (set aside by an
  earlier call's measurement, ``planted_measure``) while every member still has a
  checkpoint: training then resumes from the newest step every member restores
  (``sbjax.checkpoint.restore_latest_common``; the stateless data order gives the same
  parameters, bit for bit) and saves the final step again. A member with no checkpoint left
  is not retrained (that would start every member over): it stays excluded."""
  steps = [list_steps(w) if w.exists() else [] for w in wds]
  return all(steps) and any(c.train.steps not in s for (_, c), s in zip(group, steps))


def _train_group(p, name, group, out: Path, langs, clock, floors=None) -> bool:
  """Train one group (an arm, or a population; ``floors``: ``_train_population``'s), or
  resume a finished one that lost a final checkpoint (``lost_final``); True if anything was
  trained."""
  wds = [out / "runs" / a.name for a, _ in group]
  done = all(finished(w) is not None for w in wds)
  lost = done and lost_final(group, wds)
  if done and not lost:
    return False
  dss = _datasets(group, langs)
  if p.knobs.population or lost:
    _train_population(name, group, wds, dss, clock, _prober(group, wds, langs), floors)
  else:
    train_once(group[0][1], wds[0], dataset=dss[0], quiet=True)
  return True


def _meta(p, preset, cfgs, langs) -> dict:
  """planted_meta.json's fields of the experiment (the same in every call): preset, knobs,
  languages, tokens per arm and the rarest token (it builds the languages)."""
  c0 = cfgs[0][1]
  lang0 = langs.language(cfgs[0][0], c0)[1]
  tokens = c0.train.steps * c0.train.batch_size * c0.train.seq_len
  return {"preset": preset if isinstance(preset, str) else "custom",
          "knobs": knobs_record(p, c0), "language": lang0.info(), "steps": c0.train.steps,
          "languages": {lang_tag(a.lang): langs.language(a, c)[1].info() for a, c in cfgs},
          "tokens_per_arm": tokens, "sampler": getattr(c0.data.options, "sampler", "host"),
          "rarest_token": rarest_token(lang0, tokens),
          "types_below_50": types_below(lang0, tokens, 50.0)}


# one call's record in planted_meta.json's "runs" ("trained": the populations whose training
# ended in that call, a resumed one included; one stopped by the budget is in "stopped";
# "s_per_measure": the slowest seconds per member-checkpoint measured in that call)
CALL_KEYS = ("preset", "started", "ended", "seconds", "cpu_seconds", "trained", "stopped",
             "not_run", "estimates", "timings", "s_per_measure")


class CallRecord(shared.CallRecord):
  """planted_meta.json during one call (``experiments.shared.CallRecord``), written when the
  call starts, after every group, at each time estimate and at its end (a cut-off keeps what
  was written last): the experiment's fields (``_meta``), this call's ``timings`` (per group:
  train_s, measure_s, the member-checkpoints measured and those read from the cache (cached);
  floor_s), the ``account`` of the arms measured (None before any), ``not_run`` (the arms not
  measured yet in this call) and ``s_per_measure`` (the budget clock's measurement rate, None
  before any population was measured)."""

  def __init__(self, out: Path, p, clock):  # the call's clocks start here
    super().__init__(out / META, CALL_KEYS)
    self.p, self.arms, self.timings = p, [], {"floor_s": 0.0}
    self.set_aside, self.excluded = {}, []
    self.watch(clock)

  def write(self, **fields) -> dict:
    done, c = {a["arm"] for a in self.arms} | set(self.excluded), self.clock
    return super().write(
        **fields, timings=dict(self.timings),
        account=pm.account(self.arms, small_d=self.p.knobs.small_d) if self.arms else None,
        not_run=[a.name for a in self.p.knobs.arms if a.name not in done],
        s_per_measure=round(c.s_per_measure, 4) if c is not None and c.s_per_measure else None,
        set_aside=dict(self.set_aside), excluded=list(self.excluded))


def _measure_group(p, group, out: Path, langs, clock, rec) -> tuple[list, list, dict]:
  """(planted_arms.csv rows, planted_checkpoints.csv rows, timings) of a trained group; the
  measurement's seconds (the floors' fit excluded) over the member-checkpoints measured in
  this call (not those read from the cache) teach the budget clock its rate. Each member's
  set-aside steps go to ``rec.set_aside``, a member with no checkpoint left to
  ``rec.excluded`` (with one warning line)."""
  t, floor0 = time.perf_counter(), langs.floor_s
  arms, ck_rows, measured = [], [], 0
  for arm, cfg in group:
    _, lang, windows = langs.language(arm, cfg)
    row, ck, m = _arm_rows(arm, cfg, out / "runs" / arm.name, windows, lang,
                           langs.floor(arm, lang), p.knobs)
    if m.set_aside:
      rec.set_aside[arm.name] = m.set_aside
    if row is None:
      rec.excluded.append(arm.name)
      warnings.warn(f"{arm.name}: no checkpoint of it reads (steps "
                    f"{', '.join(str(r['step']) for r in m.set_aside)} set aside to "
                    f"{out / 'runs' / arm.name / 'checkpoints_bad'}): excluded from "
                    "planted_arms.csv, the account and the answer", RuntimeWarning, stacklevel=2)
    else:
      arms.append(row)
    ck_rows += ck
    measured += m.measured
  seconds = time.perf_counter() - t - (langs.floor_s - floor0)
  if clock is not None:
    clock.measured(measured, seconds)
  return arms, ck_rows, {"measure_s": round(seconds, 1), "measured": measured,
                         "cached": len(ck_rows) - measured}


def run_planted(out: Path, preset, verbose: bool = True) -> dict:
  """Train, measure and summarise every arm of a planted preset (a name or a Preset);
  planted_arms.csv, planted_checkpoints.csv and planted_meta.json are rewritten after every
  group. A budget stop (``planted_budget.OverBudget``) writes what the finished groups
  measured, then stops."""
  p = get_planted_preset(preset)
  out = upath(out)
  out.mkdir(parents=True, exist_ok=True)
  cfgs = [(a, arm_config(p, a)) for a in p.knobs.arms]  # all validated before any training
  langs = _Languages(p, out)
  clock = Clock(p.knobs.budget_s, p.knobs.estimate_at) if p.knobs.budget_s else None
  rec = CallRecord(out, p, clock)
  rec.meta = {**_meta(p, preset, cfgs, langs), "stopped": None}
  rec.write()  # this call's record from its start (a cut-off keeps it)
  ck_rows, gs = [], groups(p, cfgs)
  progress = RunsProgress(len(gs), "saturation-planted", disable=not verbose)
  try:
    for name, group in gs:
      progress.start(f"{name} ({len(group)} arms, {group[0][1].train.steps} steps)")
      floors = langs.floors_for(group)  # before its training: on the budget clock
      if floors is not None:
        rec.timings["floor_s"] = round(langs.floor_s, 1)
        rec.write()
      t1 = time.perf_counter()
      trained = _train_group(p, name, group, out, langs, clock, floors)
      train_s = round(time.perf_counter() - t1, 1)
      if trained:  # recorded at once: a cut-off in its measurement keeps it
        rec.trained.append(name)
        rec.write()
      arms, ck, measured = _measure_group(p, group, out, langs, clock, rec)
      rec.arms += arms
      ck_rows += ck
      write_rows(out / "planted_checkpoints.csv", ck_rows)
      write_rows(out / "planted_arms.csv", rec.arms)
      rec.timings.update({name: {"train_s": train_s, **measured},
                          "floor_s": round(langs.floor_s, 1)})
      rec.write()
      progress.finish(rec.trained[-1:] == [name])
  except OverBudget as e:
    rec.meta["stopped"] = str(e)
    print(f"stopped: {e}", file=sys.stderr, flush=True)
    raise
  finally:  # also after a preemption (SIGTERM) or a failure: this call's record, as it ended
    progress.close()
    rec.write()
  return json.loads((out / META).read_text())  # as a reader sees it (tuples as lists)
