"""Shared helpers of the benchmarks (not a test): timing, JSON lines, tables, peak FLOP/s.

Every benchmark prints one ``BENCH {json}`` line per case and a table at the end.
Timings are medians of ``reps`` repetitions after warm-up; sides that are compared run
interleaved (A, B, A, B, ...) in one process so that a noisy machine slows them alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

ROWS: list[dict] = []


def emit(rec: dict) -> dict:
  ROWS.append(rec)
  print("BENCH " + json.dumps(rec), flush=True)
  return rec


def interleaved(fns: dict, reps: int, warmup: int = 1) -> dict:
  """{name: [seconds...]} for callables run round-robin ``reps`` times after ``warmup`` calls."""
  for f in fns.values():
    for _ in range(warmup):
      f()
  out = {k: [] for k in fns}
  for _ in range(reps):
    for k, f in fns.items():
      t = time.perf_counter()
      f()
      out[k].append(time.perf_counter() - t)
  return out


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
  """Like :func:`interleaved`, but every side lives in its own (spawned) process.

  ``builders`` maps a side name to ``(builder, args)``: a module-level function that
  returns ``(run, info)`` in the child. Sides are built one at a time, warmed up once, then
  timed round-robin ``reps`` times; only the side being timed is busy. Sides in one process
  slow each other (two runtimes' thread pools and allocators on 2 cores: measured 374 vs
  268 tokens/s for the sbjax d512 step alone vs interleaved with HF in-process).
  ``env`` maps a side name to environment variables its process starts with; ``warmup``
  untimed calls follow each build.
  Returns ``({name: [seconds]}, {name: info or {"skipped": reason}})``.
  """
  import multiprocessing as mp

  if len(builders) == 1:  # nothing to isolate from: time it in this process (see below)
    return _in_process(builders, reps, warmup)
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


def _in_process(builders: dict, reps: int, warmup: int = 1) -> tuple[dict, dict]:
  """``interleaved_procs`` of one side, in this process. Besides a spawn and an import saved,
  this is what lets one side run on an accelerator at all: a parent that has opened the
  device (``jax.devices()``) holds a TPU (a child cannot open it) or has preallocated most
  of a GPU's memory."""
  ((name, (builder, args)),) = builders.items()
  try:
    run, info = builder(*args)
    for _ in range(warmup):
      run()
  except Exception as e:  # reported like a child's failure
    return {}, {name: {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}}
  out = []
  for _ in range(reps):
    t = time.perf_counter()
    run()
    out.append(time.perf_counter() - t)
  return {name: out}, {name: info}


def median(xs) -> float:
  return float(statistics.median(xs))


def load_avg() -> float:
  try:
    return round(os.getloadavg()[0], 2)
  except OSError:
    return -1.0


def machine() -> dict:
  return {"cpu_count": os.cpu_count(), "load_avg_1m": load_avg(), "machine": platform.machine()}


def peak_flops_cpu(n: int = 2048, reps: int = 10) -> dict:
  """Best f32 n×n matmul FLOP/s over jax and torch (if installed), in this process."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  best = {}
  ts = []
  for _ in range(reps):
    t = time.perf_counter()
    f(a, a).block_until_ready()
    ts.append(time.perf_counter() - t)
  best["jax"] = 2 * n ** 3 / min(ts)
  try:
    import torch

    ta = torch.randn(n, n)
    ta @ ta
    ts = []
    for _ in range(reps):
      t = time.perf_counter()
      ta @ ta
      ts.append(time.perf_counter() - t)
    best["torch"] = 2 * n ** 3 / min(ts)
  except ImportError:
    pass
  return {"peak_flops": max(best.values()), **{f"matmul_{k}_flops": v for k, v in best.items()}}


def table(cols: list[str], rows: list[dict] | None = None) -> str:
  rows = ROWS if rows is None else rows

  def fmt(v):
    if isinstance(v, float):
      return f"{v:.4g}"
    return str(v)

  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for r in rows:
    lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
  return "\n".join(lines)
