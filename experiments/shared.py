"""Helpers shared by the experiments: data paths, CSV rows, number formatting and the
experiment-level progress (run i of n, total ETA).

"Already trained?" has one rule for the whole project: ``sbjax.train.done.finished``
(``WORKDIR/DONE``), with ``sbjax.train.train_once`` to train a run unless it is finished.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from sbjax.analysis.table import atomic_write_json, read_csv, write_csv
from sbjax.data.sample_corpus import sample_corpus_dir
from sbjax.overrides import config_from  # the one override path (presets' dotted keys)

log = logging.getLogger("sbjax")
REPO = Path(__file__).resolve().parents[1]
# The default corpus of every preset: the public-domain sample shipped in the package
# (sbjax/data/sample_text: five Shakespeare plays, ~590 KB); larger corpora: --data=DIR.
DEFAULT_TEXT = sample_corpus_dir()

__all__ = ["REPO", "DEFAULT_TEXT", "config_from", "text_corpus", "write_rows", "read_rows", "write_json",
           "fmt", "RunsProgress"]


def text_corpus(data: str | Path | None = "") -> Path:
  """The corpus directory: ``data`` if given, else the packaged sample corpus
  (``sbjax.data.sample_corpus``). A clear error names the flag when ``data`` does not exist."""
  if not data:
    log.info("no --data given: using the sample corpus shipped with sbjax (%s; 5 plays, ~590 "
             "KB); published cpu-preset numbers used a larger corpus, pass --data=DIR",
             DEFAULT_TEXT)
  path = Path(data) if data else DEFAULT_TEXT
  if not path.is_dir():
    where = f"--data={data}" if data else f"the default corpus {DEFAULT_TEXT}"
    raise FileNotFoundError(f"corpus directory not found ({where}); pass --data=DIR, a "
                            "directory of UTF-8 .txt files")
  return path


def write_rows(path, rows) -> list[str]:
  """Write dict rows as CSV (atomically, columns in first-seen order); returns the columns."""
  return write_csv(path, rows)


def read_rows(path) -> list[dict]:
  return read_csv(path)


def write_json(path, obj) -> None:
  atomic_write_json(path, obj)


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


class RunsProgress:
  """An experiment's overall progress: run i of n with the total ETA (tqdm; plain log lines
  when stderr is not a terminal). The ETA is the mean time of the runs that trained so far
  times the runs left (runs read back as finished do not count towards the rate)."""

  def __init__(self, n: int, name: str, disable: bool = False):
    self.n, self.name, self.done, self.timed, self.seconds = n, name, 0, 0, 0.0
    self._t = None
    self._tty = sys.stderr.isatty()
    self._quiet = disable
    # a bar on a terminal; log lines (no carriage returns) when stderr is a file
    self.bar = tqdm(total=n, desc=name, unit="run", file=sys.stderr,
                    disable=disable or not self._tty, dynamic_ncols=True)

  def start(self, label: str) -> None:
    self._t = time.perf_counter()
    self.bar.set_postfix_str(label, refresh=self._tty)
    if not self._tty and not self._quiet:
      sys.stderr.write(f"[{self.name}] run {self.done + 1}/{self.n}: {label}\n")

  def finish(self, trained: bool = True) -> None:
    if self._t is not None and trained:
      self.seconds += time.perf_counter() - self._t
      self.timed += 1
    self._t = None
    self.done += 1
    self.bar.update(1)
    if not self._tty and not self._quiet and self.timed:
      eta = self.seconds / self.timed * (self.n - self.done)
      sys.stderr.write(f"[{self.name}] {self.done}/{self.n} runs done, ETA {eta:.0f} s\n")

  def close(self) -> None:
    self.bar.close()


# --- added by the planted/head_rank/werror_loss/vocab_threshold/target_rank helper (issue 16)
# Used by head_rank and vocab_threshold: their sweeps report through the progress callback of
# sbjax.studies.rank_sweep.run_plan.


class SweepProgress:
  """A ``progress`` callback that drives :class:`RunsProgress` from a study's messages
  (``"[i/n] NAME: training"`` / ``"...: done"``; RunsProgress counts, so the ``[i/n]`` is
  dropped): each message starts the next unit and finishes the one before; :meth:`finish`
  finishes the last."""

  def __init__(self, progress: RunsProgress, prefix: str = ""):
    self.progress, self.prefix, self._open, self._trained = progress, prefix, False, False

  def __call__(self, msg: str) -> None:
    self.finish()
    label = msg.split("] ", 1)[1] if msg.startswith("[") and "] " in msg else msg
    self.progress.start(self.prefix + label.rsplit(": ", 1)[0])
    self._open, self._trained = True, not msg.endswith(": done")

  def finish(self) -> None:
    if self._open:
      self.progress.finish(trained=self._trained)
      self._open = False


def pick_preset(presets: dict, name, experiment: str):
  """``presets[name]`` of an experiment's PRESETS (a Preset object passes through), or one
  clear error naming the experiment and its presets."""
  if not isinstance(name, str):
    return name
  if name not in presets:
    raise ValueError(f"unknown {experiment} preset {name!r}; known: {', '.join(presets)}")
  return presets[name]
