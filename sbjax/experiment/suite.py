"""Several experiments in one output folder, and the one command line that runs them.

``run_suite(registry, names, out, preset)`` runs each experiment into ``OUT/NAME`` (one that
fails is reported and the others go on; a time-budget or SIGTERM stop ends the call with exit
status 75, and a rerun resumes) and writes ``OUT/report.md``: a header (sbjax, commit, jax,
device, date, the exact command), a table of the experiments and each one's section.
``registry`` maps a name to the module that holds its ``EXPERIMENT`` (imported when run).
"""

from __future__ import annotations

import datetime
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

from sbjax.atomic import atomic_write_text
from sbjax.errors import write_log
from sbjax.experiment import runner
from sbjax.paths import upath
from sbjax.train.preempt import Preempted

TIMINGS = "timings.json"


def load(registry: dict, name: str):
  if name not in registry:
    raise ValueError(f"unknown experiment {name!r}; known: {', '.join(registry)}")
  return importlib.import_module(registry[name]).EXPERIMENT


def run_suite(registry: dict, names, out, preset: str, data: str | None = None, *,
              verbose: bool = True) -> dict:
  """Run ``names`` into ``OUT/NAME`` and write the report; returns {name: timing record}."""
  out = upath(out)
  exps = {n: load(registry, n) for n in names}
  for e in exps.values():
    e.preset(preset)  # an unknown preset is refused before anything runs
  path = out / TIMINGS
  timings = json.loads(path.read_text()) if path.exists() else {}
  for name, exp in exps.items():
    t = time.time()
    rec = {"preset": preset, "status": "ok", "error": ""}
    try:
      runner.run(exp, out / name, preset, data if exp.reads_data else None, verbose=verbose)
    except Preempted:
      raise
    except Exception as e:  # noqa: BLE001 - reported; the other experiments go on
      rec.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=write_log(e))
      if verbose:
        sys.stderr.write(f"[{name}] failed: {rec['error']} [traceback: {rec['traceback']}]\n")
    timings[name] = {**rec, "seconds": round(time.time() - t, 1)}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(timings, indent=1))
  write_report(registry, out, timings)
  return {n: timings[n] for n in names}


def _commit() -> str:
  try:
    return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                          text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (not a git checkout)"


def header() -> list[str]:
  """Where the numbers came from: versions, commit, device, date and the command."""
  import jax  # noqa: PLC0415

  from sbjax import __version__  # noqa: PLC0415

  spec = getattr(sys.modules["__main__"], "__spec__", None)
  cmd = " ".join(["python", *(["-m", spec.name] if spec else sys.argv[:1]), *sys.argv[1:]])
  return [f"sbjax {__version__}, commit {_commit()}, jax {jax.__version__}, device "
          f"{jax.devices()[0].device_kind} x{jax.device_count()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.", "",
          f"Command: `{cmd}`", ""]


def write_report(registry: dict, out, timings: dict) -> Path:
  """``OUT/report.md``: the header, the experiments' table, then each one's section."""
  out = upath(out)
  names = [n for n in registry if n in timings]
  lines = ["# sbjax report", "", *header(),
           "| experiment | preset | status | seconds |", "|---|---|---|---|"]
  lines += [f"| {n} | {timings[n]['preset']} | {timings[n]['status']} | "
            f"{timings[n]['seconds']:.1f} |" for n in names]
  for n in names:
    lines += ["", f"## {n}", ""]
    if timings[n]["status"] != "ok":
      lines.append(f"Failed: `{timings[n]['error']}`")
      continue
    exp = load(registry, n)
    lines.append(exp.report(out / n, n) if exp.report else "(no report section)")
  path = out / "report.md"
  atomic_write_text(path, "\n".join(lines) + "\n")
  return path
