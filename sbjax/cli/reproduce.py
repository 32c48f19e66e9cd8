r"""The experiment runner behind ``python -m experiments.reproduce`` / ``sbjax-reproduce``:
one report for a registry of experiments.

  python -m experiments.reproduce --out=out --quick            # the README's main job: planted
  python -m experiments.reproduce --out=out                    # every experiment, cpu preset
  python -m experiments.reproduce --out=out --only=planted,head_rank --preset=tpu
  python -m experiments.reproduce --out=out --preset=test      # every experiment, in minutes

The registry (experiment name -> module name) is the caller's: the paper experiments' is
``experiments/reproduce.py`` (this package never imports ``experiments``). Every experiment
module (imported only when selected; importing it defines no absl flags, those live in its
``__main__``) follows ``Experiment``:

    PRESETS: dict                                     # test, quick, cpu, tpu
    run(out: Path, preset: str, *, data=None) -> None # writes CSVs/JSON into out
    report_section(out: Path, rel: str) -> str        # markdown; draws figures under rel/

``data`` is ``--data`` (None: the experiment's default corpus); an experiment that trains on
no corpus (a planted language) ignores it, so one ``--data`` serves a whole run.

Experiment NAME runs in ``OUT/NAME/`` (``OUT`` local, or ``gs://bucket/dir`` and any other
``sbjax.paths`` scheme: ``OUT/NAME`` is then an ``etils.epath`` path); ``OUT/report.md`` is a
header, a timing table and the sections in order. ``--quick`` selects the ``quick`` preset and, without ``--only``, the
registry's quick default; otherwise the preset is ``--preset`` (default ``cpu``; ``test`` is the
tiny preset of the test suite) and the default selection is every experiment. Timings are kept
in ``OUT/timings.json``, so rerunning with another ``--only`` keeps the others' sections
(``write_report`` reports every experiment with a finished ``OUT/NAME/``). An experiment that
fails is reported as failed and the others go on (the command then exits with an error naming
it). A call holds ``OUT/LOCK``, and ``OUT/NAME/LOCK`` while NAME runs (``sbjax.train.lock``
``workdir_lock``): a second call into the same folder stops with one line naming the holder.
"""

from __future__ import annotations

import importlib
import json
import logging
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Protocol

from absl import flags

from . import common
from sbjax.atomic import atomic_write_json
from sbjax.paths import upath
from sbjax.train.lock import workdir_lock

PRESETS = ("test", "quick", "cpu", "tpu")
TIMINGS = "timings.json"


class Experiment(Protocol):
  """What ``Suite`` needs of an experiment module. ``run`` writes the experiment's files into
  ``out`` at the preset named ``preset``; ``data`` is the ``--data`` of the command line, the
  corpus of the text experiments (None: the experiment's default, the packaged sample corpus
  or the preset's dataset). An experiment that reads no corpus (a planted language) ignores
  ``data``, so one ``--data`` serves every experiment of a run. Other keywords of an
  experiment's ``run`` (``verbose``, ...) have defaults and are not part of the protocol."""

  PRESETS: dict

  def run(self, out: Path, preset: str, *, data: str | None = None) -> None: ...

  def report_section(self, out: Path, rel: str) -> str: ...


class Suite:
  """A registry of experiments (``{name: absolute module name}``, in report order) and the
  quick default; ``experiments`` is kept by reference (tests may add to it)."""

  def __init__(self, experiments: dict[str, str], quick_default: tuple[str, ...],
               title: str = "sbjax report"):
    self.experiments, self.quick_default, self.title = experiments, tuple(quick_default), title

  def select(self, only: str | list | tuple | None, quick: bool) -> list[str]:
    """The experiment names to run, in registry order."""
    if isinstance(only, str):
      only = [s.strip() for s in only.split(",") if s.strip()]
    if not only:
      return list(self.quick_default) if quick else list(self.experiments)
    bad = [n for n in only if n not in self.experiments]
    if bad:
      raise ValueError(f"unknown experiment(s) {bad} in --only; known: "
                       f"{', '.join(self.experiments)}")
    return [n for n in self.experiments if n in only]

  def load(self, name: str) -> Experiment:
    """The experiment module of ``name``, imported now (a clear error if it is missing).
    Experiment packages define their absl flags only in their ``__main__.py``, so importing
    them here defines none."""
    modname = self.experiments.get(name)
    if modname is None:
      raise ValueError(f"unknown experiment {name!r}; known: {', '.join(self.experiments)}")
    try:
      mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
      if e.name and (e.name == modname or modname.startswith(e.name + ".")):
        raise RuntimeError(f"experiment {name!r} is not available: module {modname} does not "
                           "exist in this checkout") from None
      raise
    for fn in ("run", "report_section"):
      if not callable(getattr(mod, fn, None)):
        raise RuntimeError(f"experiment {name!r}: module {modname} has no {fn}() function")
    return mod

  def run_all(self, out, names, preset: str, verbose: bool = True,
              data: str | None = None) -> dict:
    """Runs the experiments ``names`` at ``preset`` into OUT/NAME/, then writes the report.
    ``data`` (``--data``: a directory of .txt files; None or "" = each experiment's default)
    goes to every experiment (``Experiment.run``). Returns the timings ({name: {"seconds",
    "preset", "status", "error"}})."""
    out = upath(out)
    if preset not in PRESETS:
      raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    # one writer per folder: OUT for the call, OUT/NAME while NAME runs
    with workdir_lock(out):
      timings = _read_timings(out)
      for name in names:
        t0 = time.perf_counter()
        rec = {"preset": preset, "status": "ok", "error": ""}
        try:
          mod = self.load(name)
          if verbose:
            sys.stderr.write(f"== {name} ({preset}) -> {out / name}\n")
          with workdir_lock(out / name):
            mod.run(out / name, preset, data=data or None)
        except Exception as e:  # noqa: BLE001 - reported, the other experiments go on
          rec.update(status="failed", error=f"{type(e).__name__}: {e}")
          if verbose:
            traceback.print_exc()
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        timings[name] = rec
        _write_timings(out, timings)
      self.write_report(out)
    return timings

  def write_report(self, out) -> Path:
    """OUT/report.md from every experiment of the registry with a timing record in OUT."""
    out = upath(out)
    timings = _read_timings(out)
    names = [n for n in self.experiments if n in timings]
    lines = [f"# {self.title}", "",
             f"{len(names)} experiment(s): {', '.join(names) or 'none yet'}. Every number "
             "below is read from the CSV and JSON files in each experiment's directory.", "",
             f"Python {platform.python_version()}, {platform.machine()}.", "",
             "| experiment | preset | status | seconds |", "|---|---|---|---|"]
    for n in names:
      t = timings[n]
      lines.append(f"| {n} | {t['preset']} | {t['status']} | {t['seconds']:.1f} |")
    total = sum(timings[n]["seconds"] for n in names)
    lines += ["", f"Total: {total:.1f} s.", ""]
    for n in names:
      lines += self._section(out, n, timings[n])
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path

  def _section(self, out: Path, name: str, timing: dict) -> list[str]:
    if timing["status"] != "ok":
      return [f"## {name}", "", f"Failed: `{timing['error']}`", ""]
    try:
      return [self.load(name).report_section(out / name, name).rstrip(), ""]
    except Exception as e:  # noqa: BLE001
      return [f"## {name}", "", f"The report section could not be written: "
              f"`{type(e).__name__}: {e}`", ""]

  def define_flags(self):
    """The CLI flags (defined only when run as a script: the tests import the registry)."""
    flags.DEFINE_string("out", "out", "output directory (local, or gs://bucket/dir)")
    flags.DEFINE_bool("quick", False, "the README's main job: the quick preset (<= 10 min on 2 "
                      "CPU cores), and only " + ",".join(self.quick_default)
                      + " unless --only is given")
    flags.DEFINE_list("only", [], "experiments to run, comma separated; known: "
                      + ", ".join(self.experiments))
    flags.DEFINE_enum("preset", "cpu", list(PRESETS), "preset when --quick is not given (test: "
                      "the tiny preset of the test suite)")
    flags.DEFINE_string("data", "", "a directory of .txt files for the text experiments "
                        "(default: the sample corpus shipped in sbjax/data/sample_text)")

  def main(self, argv):
    del argv
    f = flags.FLAGS
    out, quick, only, preset = upath(f.out), bool(f.quick), list(f.only), f.preset
    names = self.select(only, quick)
    timings = self.run_all(out, names, "quick" if quick else preset, data=f.data)
    report = out / "report.md"
    failed = [n for n in names if timings[n]["status"] != "ok"]
    common.result(json.dumps({"report": str(report), "failed": failed,
                              "seconds": {n: timings[n]["seconds"] for n in names}}))
    if failed:
      raise RuntimeError("experiment(s) failed: " + "; ".join(
          f"{n}: {timings[n]['error']}" for n in failed) + f" (see {report})")

  def cli(self):
    """A console script (``sbjax-reproduce``) or ``python -m``: defines the flags (here, so
    --helpshort lists them for the program) and runs ``main``."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    self.define_flags()
    common.run_script(self.main, __name__)


def _read_timings(out: Path) -> dict:
  path = out / TIMINGS
  return json.loads(path.read_text()) if path.exists() else {}


def _write_timings(out: Path, timings: dict) -> None:
  atomic_write_json(out / TIMINGS, timings, indent=2)


if __name__ == "__main__":
  sys.exit("error: sbjax.cli.reproduce is the runner and holds no experiments; run "
           "python -m experiments.reproduce (or sbjax-reproduce), whose registry is "
           "experiments/reproduce.py")
