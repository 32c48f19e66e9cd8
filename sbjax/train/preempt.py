"""Preemption: SIGTERM saves a checkpoint at the next step boundary, then the process exits.

``Preemption`` (a loop hook and the loop's ``stop`` test) only sets a flag; ``run_loop`` makes
the step in flight a save boundary, the hooks close, and ``sbjax.train.train`` raises
``Preempted``: a ``SystemExit`` with status 75 (``EX_TEMPFAIL``), so a scheduler retries it and
the rerun resumes bit for bit. A time budget (``set_deadline``) stops the same way. Multi-process
runs must stop at the same step on every host: there the decision is JAX's preemption sync
point and no handler is installed. The old handler comes back at the end of the loop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import jax

from sbjax.train.loop import Boundary, Hook

log = logging.getLogger("sbjax")

_deadline: list = [None]  # a time budget (``set_deadline``): the same stop as SIGTERM


def set_deadline(t: float | None) -> None:
  """Stop every run at its first step boundary after the time ``t`` (``time.time()``), as
  SIGTERM does: save that step, exit 75; the same command again resumes (None: no budget)."""
  _deadline[0] = t


class Preempted(SystemExit):
  """The run saved its checkpoint after SIGTERM and stops (exit status 75)."""

  def __init__(self, step: int, where: str):
    super().__init__(75)  # sysexits.h EX_TEMPFAIL
    self.step, self.where = step, where
    budget = _deadline[0] is not None and time.time() >= _deadline[0]
    self.why = "time budget reached" if budget else "preempted (SIGTERM)"

  def __str__(self) -> str:
    return f"{self.why}: saved step {self.step} in {self.where}; rerun the same command to resume"


class Preemption(Hook):
  """The SIGTERM flag (module doc): ``preemption(step)`` is the loop's ``stop`` test;
  ``saved_step`` is the step saved at the stop boundary (None if the run was not stopped)."""

  def __init__(self):
    self.requested, self.saved_step, self._old = False, None, None
    self.multi = jax.process_count() > 1

  def _handle(self, signum, frame) -> None:
    if not self.requested:
      self.requested = True
      log.warning("SIGTERM received: saving a checkpoint after the current step")

  def begin(self, state, start: int, end: int) -> None:
    if not self.multi and threading.current_thread() is threading.main_thread():
      self._old = signal.signal(signal.SIGTERM, self._handle)

  def __call__(self, step: int) -> bool:
    if not self.multi:
      return self.requested or (_deadline[0] is not None and time.time() >= _deadline[0])
    from jax.experimental import multihost_utils  # deferred: multi-process runs only
    try:
      return bool(multihost_utils.reached_preemption_sync_point(step))
    except RuntimeError:  # no preemption sync manager (jax.distributed without it)
      return False

  def on_boundary(self, b: Boundary, state) -> None:
    if b.stop:
      self.saved_step = b.step

  def close(self) -> None:
    if self._old is not None:
      signal.signal(signal.SIGTERM, self._old)
      self._old = None
