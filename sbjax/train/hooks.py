"""Hooks of ``sbjax.train.loop.run_loop``; each works for one run (scalar metrics) or N
members (metrics with a leading member axis, one workdir per member).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Callable, Sequence

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.paths import upath
from sbjax.progress import Reporter, fmt_time
from sbjax.train.loop import Boundary, Hook
from sbjax.train.tensorboard import TensorBoardMirror
from sbjax.train.workdir import METRICS, NonFiniteLossError, append_jsonl

log = logging.getLogger("sbjax")


class Ledger:
  """Per-member counters the hooks share: skipped steps and the last saved step."""

  def __init__(self, skipped: Sequence[int], last_saved=None):
    self.skipped, self.last_saved = list(skipped), [last_saved] * len(skipped)


class Records(Hook):
  """``write(member, rec)`` appends to ``dirs[member]/metrics.jsonl`` and mirrors it to
  TensorBoard (``dirs[member]/tb``); a no-op unless ``enabled`` (process 0)."""

  def __init__(self, dirs, *, enabled: bool = True):
    self.paths = [upath(d) / METRICS for d in dirs]
    self.enabled = enabled
    self.tb = TensorBoardMirror(dirs if enabled else [])

  def write(self, member: int, rec: dict) -> None:
    if self.enabled:
      append_jsonl(self.paths[member], rec)
      self.tb.write(member, rec)

  def on_boundary(self, b: Boundary, state) -> None:
    self.tb.flush()

  def close(self) -> None:
    self.tb.close()


class NanPolicy(Hook):
  """A step whose loss is not finite or whose ``ok`` is false: skipped while the member has
  skipped fewer than ``limit`` steps (``metrics["skip"]`` set, a warning), else
  ``NonFiniteLossError(stop_message(member, step, metrics_of_member))``."""

  def __init__(self, limit: int, ledger: Ledger, stop_message: Callable):
    self.limit, self.ledger, self.stop_message = limit, ledger, stop_message

  def on_step(self, i: int, m: dict) -> None:
    loss, ok = np.atleast_1d(m["loss"]), np.atleast_1d(m["ok"])
    skip = np.zeros(loss.shape, bool)
    for j in range(len(loss)):
      if ok[j] and math.isfinite(float(loss[j])):
        continue
      if self.limit > 0 and self.ledger.skipped[j] < self.limit:
        self.ledger.skipped[j] += 1
        skip[j] = True
        log.warning("%snon-finite loss or update at step %d: skipped (%d/%d)",
                    f"member {j}: " if np.ndim(m["loss"]) else "", i, self.ledger.skipped[j],
                    self.limit)
        continue
      raise NonFiniteLossError(self.stop_message(j, i, {k: np.atleast_1d(v)[j]
                                                        for k, v in m.items()}))
    m["skip"] = skip if np.ndim(m["loss"]) else bool(skip[0])


class TrainLog(Hook):
  """Train records {step, loss, acc, grad_norm, lr, gamma, tokens_per_sec} every ``log_every``
  steps and at the last; ``lr_fns[member](step)`` the learning rate, ``gamma_fns[member](i + 1)``
  Γ = λ Σ_{t≤i} η_t (the weight-decay timescales elapsed once step i's update is applied)."""

  def __init__(self, records: Records, log_every: int, lr_fns, tokens_per_step: int,
               gamma_fns):
    self.records, self.every, self.lr_fns = records, log_every, lr_fns
    self.tokens_per_step, self.gamma_fns = tokens_per_step, gamma_fns

  def begin(self, state, start: int, end: int) -> None:
    self.end, self.t_last, self.tokens = end, time.perf_counter(), 0

  def on_step(self, i: int, m: dict) -> None:
    skip = np.atleast_1d(m.get("skip", False))
    if skip.all():
      return
    self.tokens += self.tokens_per_step
    if not self.records.enabled or not (i % self.every == 0 or i == self.end - 1):
      return
    now = time.perf_counter()
    tps = self.tokens / max(now - self.t_last, 1e-9)
    self.t_last, self.tokens = now, 0
    loss, acc, gnorm = (np.atleast_1d(m[k]) for k in ("loss", "acc", "grad_norm"))
    for j in range(len(loss)):
      if not skip[j if len(skip) > 1 else 0]:
        self.records.write(j, {"step": i, "loss": float(loss[j]), "acc": float(acc[j]),
                               "grad_norm": float(gnorm[j]), "lr": float(self.lr_fns[j](i)),
                               "tokens_per_sec": tps, "gamma": float(self.gamma_fns[j](i + 1))})


class Progress(Hook):
  """Progress of one loop (``sbjax.progress.Reporter``): a bar on a terminal, else a log line
  every ``every`` steps, at most one per ``min_interval`` seconds, and at the last step; the
  rate and ETA count from the end of the first step (no compilation)."""

  def __init__(self, name: str, total: int, every: int, *, tokens_per_step: int = 0,
               min_interval: float = 5.0, stream=None):
    self.name, self.total, self.every = name, total, max(1, every)
    self.tokens_per_step, self.min_interval = tokens_per_step, min_interval
    self.stream = stream or sys.stderr
    self.report, self.t1, self.n1, self.t_line = None, None, 0, -math.inf

  def begin(self, state, start: int, end: int) -> None:
    self.end = end

  def on_step(self, i: int, m: dict) -> None:
    now, loss = time.perf_counter(), float(np.mean(m["loss"]))
    if self.t1 is None:  # step i (and its compilation) is done: rates start here
      self.t1, self.n1 = now, i + 1
      self.report = Reporter(self.name, self.total, "step", initial=i + 1, stream=self.stream)
    if self.report.tty:
      self.report.advance(i + 1 - self.report.bar.n, f"loss {loss:.4f}")
      return
    last = i == self.end - 1
    if not (last or (i % self.every == 0 and now - self.t_line >= self.min_interval)):
      return
    self.t_line = now
    rate = (i + 1 - self.n1) / (now - self.t1) if now > self.t1 and i + 1 > self.n1 else 0.0
    speed = f"{rate * self.tokens_per_step:,.0f} tok/s"
    eta = fmt_time((self.end - i - 1) / rate) if rate > 0 else "?"
    self.report.line(f"step {i + 1}/{self.total} loss {loss:.4f} "
                     f"{speed if rate > 0 else '(compiled)'} ETA {eta}")

  def close(self) -> None:
    if self.report is not None:
      self.report.close()
      self.report = None


class Evaluate(Hook):
  """At an eval boundary: ``evaluate(params)`` -> one {eval_loss, eval_acc} per member,
  written as eval records; ``last[member]`` keeps the newest (with its step)."""

  def __init__(self, evaluate: Callable, records: Records, n: int):
    self.evaluate, self.records, self.last = evaluate, records, [{} for _ in range(n)]

  def on_boundary(self, b: Boundary, state) -> None:
    if b.eval:
      for j, rec in enumerate(self.evaluate(state.params)):  # a collective: every process
        rec = {"step": b.step, **rec}
        self.records.write(j, rec)
        self.last[j] = rec


class Checkpoint(Hook):
  """At a save boundary (a stop boundary too, off the schedule): refuse non-finite parameters
  (``finite(params)``: bool per member), else save every member's ``split(state)`` with
  ``meta(member, step)``."""

  def __init__(self, mngrs, ledger: Ledger, finite: Callable, split: Callable, meta: Callable):
    self.mngrs, self.ledger, self.finite, self.split, self.meta = mngrs, ledger, finite, split, meta

  def on_boundary(self, b: Boundary, state) -> None:
    if not b.save:
      return
    ok = np.atleast_1d(np.asarray(self.finite(state.params)))
    bad = [j for j in range(len(ok)) if not ok[j]]
    if bad:
      raise NonFiniteLossError(
          f"parameters of members {bad} became non-finite before step {b.step}; not saving. "
          f"Last good checkpoints: {[self.ledger.last_saved[j] for j in bad]}.")
    for j, (params, opt_state) in enumerate(self.split(state)):
      ckpt.save(self.mngrs[j], b.step, params, opt_state, self.meta(j, b.step), force=b.stop)
      self.ledger.last_saved[j] = b.step

  def close(self) -> None:
    for mngr in self.mngrs:
      ckpt.finish(mngr)
