"""Glue shared by the experiments: the lock of an output folder (``locks_out``: one writer per
--out), CSV rows, number formatting and report sentences, and the writers of figures and
arrays that take an output path local or remote (``gs://``: ``out`` is then an
``etils.epath`` path, ``sbjax.paths.upath``). The library-grade pieces they use live in
sbjax and are re-exported here: ``workdir_lock`` (``sbjax.train.lock``), ``config_from``
(``sbjax.overrides``), ``text_corpus``/``with_corpus``/``DEFAULT_TEXT``
(``sbjax.studies.corpus``), ``Preset``/``pick_preset`` (``sbjax.studies.presets``),
``RunsProgress``/``SweepProgress`` (``sbjax.studies.progress``).

"Already trained?" has one rule for the whole project: ``sbjax.train.done.finished``
(``WORKDIR/DONE``), with ``sbjax.train.train_once`` to train a run unless it is finished.
"""

from __future__ import annotations

import functools
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

from sbjax.analysis.table import atomic_write_bytes, atomic_write_json, read_csv, write_csv
from sbjax.atomic import is_local
from sbjax.paths import local_file, upath
from sbjax.overrides import config_from  # the one override path (presets' dotted keys)
from sbjax.studies.corpus import DEFAULT_TEXT, text_corpus, with_corpus
from sbjax.studies.presets import Preset, pick_preset
from sbjax.studies.progress import RunsProgress, SweepProgress
from sbjax.train.lock import workdir_lock
from sbjax.train.preempt import EXIT_PREEMPTED

REPO = Path(__file__).resolve().parents[1]

__all__ = ["REPO", "DEFAULT_TEXT", "config_from", "text_corpus", "with_corpus", "write_rows",
           "read_rows", "write_json", "fmt", "RunsProgress", "SweepProgress", "Preset",
           "pick_preset", "claims_sentences", "span", "upath", "save_figure", "save_npz",
           "load_np", "main_flags", "SAMPLE_TEXT_HELP", "utc", "with_history",
           "call_end", "calls_text", "CallRecord", "workdir_lock", "locks_out"]

SAMPLE_TEXT_HELP = ("a directory of .txt files (default: the sample corpus shipped in "
                    "sbjax/data/sample_text)")


def main_flags(name: str, presets, data_help: str | None = SAMPLE_TEXT_HELP,
               preset_help: str | None = None):
  """The flags of ``python -m experiments.<name>``: --out (default ``out/<name>``), --preset
  (one of ``presets``, default cpu; its help lists them unless ``preset_help``) and --data (a
  string, default ''; not defined when ``data_help`` is None). Returns the holders
  (OUT, PRESET, DATA), DATA None without --data."""
  out = flags.DEFINE_string("out", f"out/{name}", "output directory")
  preset = flags.DEFINE_enum("preset", "cpu", list(presets), preset_help or " | ".join(presets))
  data = None if data_help is None else flags.DEFINE_string("data", "", data_help)
  return out, preset, data


def locks_out(out_flag):
  """Decorates an experiment's ``main(argv)``: the call holds ``workdir_lock(out_flag.value)``
  (``OUT/LOCK``, ``sbjax.train.lock``) from its start to its end, so a second call into the
  same --out stops with one line naming the holder before it writes anything."""

  def decorate(main):
    @functools.wraps(main)
    def locked(argv):
      with workdir_lock(out_flag.value):
        return main(argv)
    return locked
  return decorate


def write_rows(path, rows) -> list[str]:
  """Write dict rows as CSV (atomically, columns in first-seen order); returns the columns."""
  return write_csv(path, rows)


def read_rows(path, text: tuple = ()) -> list[dict]:
  """``write_rows``' rows back: numbers as floats, except the columns named in ``text``."""
  return read_csv(path, text)


def write_json(path, obj) -> None:
  atomic_write_json(path, obj)


def save_figure(fig, path, **kwargs) -> None:
  """``fig.savefig(path, **kwargs)``; a remote ``path`` gets the bytes as one object (the
  format from its suffix)."""
  if is_local(path):
    fig.savefig(path, **kwargs)
    return
  buf = io.BytesIO()
  fig.savefig(buf, format=upath(path).suffix.lstrip(".") or "png", **kwargs)
  atomic_write_bytes(path, buf.getvalue())


class BudgetExit(SystemExit):
  """A device preset's run stopped cleanly before its budget ran out: exit status 75, as a
  preemption (``sbjax.train.preempt.EXIT_PREEMPTED``); a rerun of the same command resumes."""

  def __init__(self, message: str):
    super().__init__(EXIT_PREEMPTED)
    self.message = message

  def __str__(self) -> str:
    return self.message


class BudgetClock:
  """A run's start, time budget (seconds since the start; 0: none) and the slowest seconds per
  member-token seen so far, for the device presets' budget stops; ``over`` is the exception
  a stop raises, ``unit`` names what is trained ("group", "population")."""

  def __init__(self, budget_s: float, estimate_at: int, *, over: type, unit: str):
    self.t0, self.budget_s, self.estimate_at = time.perf_counter(), float(budget_s), estimate_at
    self.s_per_token, self.over, self.unit = 0.0, over, unit
    self.estimates: dict = {}  # unit's name -> {"s_per_step", "steps", "projected_end_s"}
    self.on_estimate = None  # called after each estimate is kept (CallRecord.watch)

  def elapsed(self) -> float:
    return time.perf_counter() - self.t0

  def check_start(self, name: str, member_tokens: int, after_s: float = 0.0,
                  detail: str = "") -> None:
    """Refuse to start a ``unit`` that the slowest rate so far says cannot fit: its
    ``member_tokens`` at that rate, plus ``after_s`` seconds of what follows its training
    (saturation: its measurement; ``detail`` says how the need splits, for the message)."""
    need = self.s_per_token * member_tokens + after_s
    if self.budget_s and self.elapsed() + need > self.budget_s:
      raise self.over(f"{self.unit} {name} needs ~{need:.0f} s{detail}, "
                      f"{self.budget_s - self.elapsed():.0f} s of the {self.budget_s:g} s "
                      "budget are left: stopped before it; rerun the same command to resume "
                      f"(finished {self.unit}s are kept)")

  def estimate(self, name: str, per_step: float, member_tokens_per_step: int, steps: int,
               end: float, stop_text: str, after_s: float = 0.0, record: dict | None = None,
               note=None) -> None:
    """Record a ``unit``'s measured rate and projected end (seconds since the start: ``end``,
    its training's, plus ``after_s``, what follows it; ``record``: more fields of the
    estimate), print the estimate on stderr (``note(estimate)`` appended: what the extra
    fields say), call ``on_estimate`` (a meta writer: the estimate survives a cut-off), and
    stop (``over``, saying ``stop_text``) past the budget."""
    self.s_per_token = max(self.s_per_token, per_step / member_tokens_per_step)
    total = end + after_s
    self.estimates[name] = e = {"s_per_step": per_step, "steps": steps,
                                "projected_end_s": round(total, 1), **(record or {})}
    print(f"estimate: {self.unit} {name}: {steps} steps, {per_step:.4g} s/step, "
          f"ends at ~{total:.0f} s of the run (now {self.elapsed():.0f} s)"
          + (f"; {note(e)}" if note is not None else ""), file=sys.stderr, flush=True)
    if self.on_estimate is not None:
      self.on_estimate()
    if self.budget_s and total > self.budget_s:
      raise self.over(f"{self.unit} {name} would end at ~{total:.0f} s, past the "
                      f"{self.budget_s:g} s budget: {stop_text}")


def utc(t: float) -> str:
  """``t`` (seconds since the epoch) as ISO-8601 UTC, second resolution: a call record's
  ``started`` and ``ended`` (they sort in call order as strings)."""
  return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def with_history(path, meta: dict, keys: tuple) -> dict:
  """``meta`` (this call's record of an experiment folder, the JSON at ``path``) with
  ``runs``: the records of the earlier calls into the same folder (the file's ``runs``; a
  file written before ``runs`` existed counts as one record, its own fields), then this
  call's (``meta``'s ``keys``). A rerun after a device preset's budget stop so keeps what
  stopped the first call and when; nothing earlier is lost. The top level stays the latest
  call's."""
  path = upath(path)
  old = json.loads(path.read_text()) if path.exists() else None
  runs = [] if old is None else old.get("runs") or [{k: old.get(k) for k in keys}]
  return {**meta, "runs": runs + [{k: meta.get(k) for k in keys}]}


def call_end(r: dict) -> str:
  """How one call of a device preset ended (a record of ``with_history``'s ``runs``): stopped
  by the budget (and why), ended with units not run, or ran to its end."""
  if r.get("stopped"):
    return f"stopped by the budget ({r['stopped']})"
  if r.get("not_run"):
    return f"ended with {', '.join(r['not_run'])} not run"
  return "ran to its end"


def calls_text(runs: list[dict]) -> list[str]:
  """When more than one call wrote an experiment folder (its meta's ``runs``, ``with_history``:
  a rerun after a budget stop): one report sentence with each call's times, the units whose
  training finished in it (``trained``) and how it ended (``call_end``); [] for one call."""
  if len(runs) < 2:
    return []
  said = [f"call {i + 1} ({r.get('started') or '?'} to {r.get('ended') or '?'} UTC; training "
          f"finished: {', '.join(str(t) for t in r.get('trained') or []) or 'none'}): "
          f"{call_end(r)}" for i, r in enumerate(runs)]
  return [f"This folder was written by {len(runs)} calls of the command: {'; '.join(said)}."]


class CallRecord:
  """One call's record in an experiment folder's meta JSON (``path``): the experiment's fields
  (``meta``, updated by ``write``'s keywords), this call's ``started``, ``ended``, ``seconds``,
  ``cpu_seconds`` (this process), ``trained`` (the units whose training ended in this call) and
  the budget clock's ``estimates``, and ``runs``: the earlier calls' records (read once, at the
  first write: ``with_history``) then this call's (its ``keys``). Rewritten by each ``write``:
  at the start, after each unit, at each estimate (``watch``) and at the end, so a call that is
  cut off (no chance to write) still leaves what it finished, its estimates and when."""

  def __init__(self, path, keys: tuple, meta: dict | None = None):  # the call's clocks start
    self.path, self.keys, self.meta = upath(path), keys, dict(meta or {})
    self.t0, self.c0, self.wall0 = time.perf_counter(), time.process_time(), time.time()
    self.trained, self.clock, self._earlier = [], None, None

  def watch(self, clock) -> None:
    """Record ``clock``'s estimates, each written at once (``BudgetClock.on_estimate``)."""
    self.clock = clock
    if clock is not None:
      clock.on_estimate = self.write

  def write(self, **fields) -> dict:
    self.meta.update(fields)
    m = {**self.meta, "started": utc(self.wall0), "ended": utc(time.time()),
         "seconds": round(time.perf_counter() - self.t0, 1),
         "cpu_seconds": round(time.process_time() - self.c0, 1), "trained": list(self.trained),
         "estimates": dict(self.clock.estimates) if self.clock is not None else {}}
    if self._earlier is None:  # this call's first write: the file's records come first
      self._earlier = with_history(self.path, m, self.keys)["runs"][:-1]
    full = {**m, "runs": self._earlier + [{k: m.get(k) for k in self.keys}]}
    write_json(self.path, full)
    return full


def welch_clause(w: dict, n_a: int, n_b: int) -> str:
  """The end of a report sentence on one Welch comparison (``sbjax.studies.welch.welch``'s
  dict ``w``): "<diff> nats, 95% Welch CI [lo, hi] over n_a + n_b seeds: **verdict**"."""
  from sbjax.studies.welch import LEVEL  # deferred: it loads scipy.stats (few reports need it)

  f4 = lambda v: fmt(v, spec=".4f")  # noqa: E731
  return (f"{f4(w['diff'])} nats, {int(LEVEL * 100)}% Welch CI [{f4(w['lo'])}, {f4(w['hi'])}]"
          f" over {n_a} + {n_b} seeds: **{w['verdict']}**")


def finish_figure(fig, path, title: str | None = None, *, dpi: int = 110, fontsize=None):
  """A report figure's last steps: ``title`` as the suptitle, tight layout, saved to ``path``
  (``save_figure``), closed; returns ``path``."""
  import matplotlib.pyplot as plt  # deferred: reading a CSV must not import matplotlib

  if title is not None:
    fig.suptitle(title, fontsize=fontsize)
  fig.tight_layout()
  save_figure(fig, path, dpi=dpi)
  plt.close(fig)
  return path


def save_npz(path, **arrays) -> None:
  """``np.savez(path, **arrays)``; a remote ``path`` gets the bytes as one object."""
  if is_local(path):
    np.savez(path, **arrays)
    return
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  atomic_write_bytes(path, buf.getvalue())


def load_np(path, **kwargs):
  """``np.load`` of a local or remote ``.npy``/``.npz`` (a remote one from its local copy,
  ``sbjax.paths.local_file``)."""
  return np.load(local_file(path), **kwargs)


def claims_sentences(sup: list, con: list, und: list,
                     und_label: str = "Not decided") -> list[str]:
  """A report's verdict on a paper's claims: "Supported: a; b." "Contradicted: none." and,
  when some claims are undecided, "<und_label>: c."."""
  out = ["Supported: " + ("; ".join(sup) or "none") + ".",
         "Contradicted: " + ("; ".join(con) or "none") + "."]
  if und:
    out.append(f"{und_label}: " + "; ".join(und) + ".")
  return out


def span(values) -> str:
  """'a' when the values are (numerically) one, else 'min–max' (3 significant digits)."""
  lo, hi = min(values), max(values)
  return f"{lo:.3g}" + ("" if hi - lo < 1e-9 else f"–{hi:.3g}")


def fmt(v, nd: int = 4, spec: str | None = None) -> str:
  """A number for a report table: '–' for None/''/NaN/inf, integers without decimals,
  floats with ``nd`` significant digits (or the format ``spec``), anything else as str."""
  if v is None or v == "":
    return "–"
  if isinstance(v, (bool, str)):
    return str(v)
  try:
    x = float(v)
  except (TypeError, ValueError):
    return str(v)
  if not math.isfinite(x):
    return "–"
  if spec is not None:
    return format(x, spec)
  if x.is_integer() and abs(x) < 1e15:
    return str(int(x))
  return f"{x:.{nd}g}"
