"""One benchmark side per fresh process, one after another, each under a time limit (not a test).

What an accelerator needs where ``_bench.interleaved_procs`` suits a noisy CPU: every side
(e.g. sbjax, HF eager, HF torch.compile) gets the device to itself, its own memory (a GPU's
peak memory per side, nothing left over from the side before) and its own clock, so a
side that does not finish (torch.compile of a 24-layer model) is cut off and reported as
such while the others' numbers stand.

:func:`run_side` starts ``python SCRIPT ARGS...`` in a new process group, waits at most
``limit_s`` and kills the whole group (compile workers included) when the time is up. The
child prints ``BENCH {json}`` rows (``_bench.emit``) and may print ``PHASE name seconds``
lines (``phase``), e.g. when its compile has finished; both are read back even from a child
that was cut off.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def phase(name: str, seconds: float) -> None:
  """Print a ``PHASE`` line for the parent (a side that is cut off later still reports it)."""
  print(f"PHASE {name} {seconds:.2f}", flush=True)


def parse(stdout: str) -> tuple[list[dict], dict]:
  """The ``BENCH`` rows and ``PHASE`` seconds in a child's output."""
  rows, phases = [], {}
  for line in stdout.splitlines():
    if line.startswith("BENCH "):
      rows.append(json.loads(line[6:]))
    elif line.startswith("PHASE "):
      _, name, secs = line.split()
      phases[name] = float(secs)
  return rows, phases


def run_side(script: str, args: list[str], limit_s: float, env: dict | None = None,
             log=None) -> dict:
  """Run one side; returns {"rc", "seconds", "timed_out", "rows", "phases", "tail"}.

  ``rc`` is the child's exit status (``None`` when it was cut off after ``limit_s``);
  ``tail`` the last lines of its stderr; ``log`` (a file) receives its whole output."""
  t0 = time.perf_counter()
  p = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, start_new_session=True,
                       env={**os.environ, **(env or {})})
  timed_out = False
  try:
    out, err = p.communicate(timeout=max(1.0, limit_s))
  except subprocess.TimeoutExpired:
    timed_out = True
    _kill_group(p)
    out, err = p.communicate()
  except BaseException:  # e.g. this process interrupted at its own limit: no child outlives it
    _kill_group(p)
    raise
  if log is not None:
    log.write(out + err)
    log.flush()
  rows, phases = parse(out)
  return {"rc": None if timed_out else p.returncode, "seconds": round(time.perf_counter() - t0, 1),
          "timed_out": timed_out, "rows": rows, "phases": phases,
          "tail": "\n".join(err.strip().splitlines()[-5:])}


def _kill_group(p: subprocess.Popen) -> None:
  try:
    os.killpg(p.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass
