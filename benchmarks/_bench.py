"""Shared helpers of the benchmarks (not a test): timing, JSON lines, tables, docs/benchmarks.md.

Every benchmark prints one ``BENCH {json}`` line per case and a table at the end; with
``--write_docs`` it also replaces its own section of docs/benchmarks.md. Timings are medians of
``reps`` repetitions after warm-up; sides that are compared run interleaved (A, B, A, B, ...)
in one run so that a noisy machine slows them alike, and every ratio is against a baseline
measured in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOCS = ROOT / "docs" / "benchmarks.md"
if str(ROOT) not in sys.path:
  sys.path.insert(0, str(ROOT))

ROWS: list[dict] = []


def emit(rec: dict) -> dict:
  ROWS.append(rec)
  print("BENCH " + json.dumps(rec), flush=True)
  return rec


def timeit(fn, reps: int, warm: bool = True) -> tuple[float, list[float]]:
  """(median seconds, all seconds) of ``reps`` calls of ``fn``, after one untimed call."""
  if warm:
    fn()
  ts = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts), ts


def _side_worker(conn, builder, args, warmup=1):
  try:
    run, info = builder(*args)
    for _ in range(warmup):  # warm-up (compile, first-touch allocations)
      run()
    conn.send(("ok", info))
  except Exception as e:  # reported by the parent, the other sides go on
    conn.send(("err", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
    return
  while conn.recv() == "run":
    t = time.perf_counter()
    run()
    conn.send(time.perf_counter() - t)


def interleaved_procs(builders: dict, reps: int, env: dict | None = None,
                      warmup: int = 1) -> tuple[dict, dict]:
  """Time sides round-robin, each in its own spawned process (two runtimes in one process
  slow each other on 2 cores). ``builders`` maps a side to ``(builder, args)``: a
  module-level function returning ``(run, info)`` in the child; ``env`` maps a side to the
  environment its process starts with. A single side runs in this process (which may hold
  an accelerator a child could not open).
  Returns ``({side: [seconds]}, {side: info or {"skipped": reason}})``."""
  import multiprocessing as mp

  if len(builders) == 1:
    ((name, (builder, args)),) = builders.items()
    run, info = builder(*args)
    for _ in range(warmup):
      run()
    return {name: timeit(run, reps, warm=False)[1]}, {name: info}
  ctx = mp.get_context("spawn")
  conns, procs, info = {}, [], {}
  try:
    for name, (builder, args) in builders.items():
      parent, child = ctx.Pipe()
      p = ctx.Process(target=_side_worker, args=(child, builder, args, warmup), daemon=True)
      with _environ((env or {}).get(name, {})):
        p.start()
      procs.append(p)
      status, val = parent.recv()
      if status == "ok":
        conns[name], info[name] = parent, val
      else:
        info[name] = {"skipped": val}
    out = {k: [] for k in conns}
    for _ in range(reps):
      for name, c in conns.items():
        c.send("run")
        out[name].append(c.recv())
    return out, info
  finally:
    for c in conns.values():
      c.send("stop")
    for p in procs:
      p.join(timeout=30)
      if p.is_alive():
        p.kill()


@contextlib.contextmanager
def _environ(overrides: dict):
  """os.environ with ``overrides`` for the duration (a spawned child inherits it at start)."""
  saved = {k: os.environ.get(k) for k in overrides}
  os.environ.update(overrides)
  try:
    yield
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


def median(xs) -> float:
  return float(statistics.median(xs))


def machine() -> dict:
  return {"cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
          "machine": platform.machine()}


def peak_rss_mb() -> float:
  """This process's peak resident memory, MB (VmHWM: its own; ru_maxrss would carry the
  parent's high-water mark over a fork and exec)."""
  with open("/proc/self/status") as fh:
    return int(next(ln for ln in fh if ln.startswith("VmHWM:")).split()[1]) / 1024


def peak_flops_cpu(n: int = 2048, reps: int = 10) -> float:
  """The best float32 n×n matmul FLOP/s jax reaches in this process."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  _, ts = timeit(lambda: f(a, a).block_until_ready(), reps)
  return 2 * n ** 3 / min(ts)


def fmt(v) -> str:
  if isinstance(v, float):
    return f"{v:.4g}"
  return "" if v is None else str(v)


def table(cols: list[str], rows: list[dict] | None = None) -> str:
  """A markdown table of ``rows`` (default: every emitted row) in columns ``cols``."""
  rows = ROWS if rows is None else rows
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
  return "\n".join(lines)


def _commit() -> str:
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def write_docs(key: str, title: str, body: str, device: str = "cpu") -> None:
  """Replace the section ``key`` of docs/benchmarks.md (between its begin/end markers, one per
  benchmark and device) with ``body``, headed by the command, date, commit and machine;
  a new key is appended as a ``## title`` section."""
  key = f"{key} {device}"
  begin, end = f"<!-- begin {key} -->", f"<!-- end {key} -->"
  cmd = " ".join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
  stamp = (f"`{cmd}` · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · commit "
           f"{_commit()} · {device}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
  block = f"{begin}\n{stamp}\n\n{body.strip()}\n{end}"
  text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
  if begin in text:
    text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
  else:
    text = text.rstrip("\n") + f"\n\n## {title} ({device})\n\n{block}\n"
  DOCS.write_text(text)
  print(f"wrote {DOCS.relative_to(ROOT)} [{key}]", flush=True)
