"""Preemption: SIGTERM saves a checkpoint at the next step boundary, then the process exits.

A preempted Cloud TPU VM (or a job scheduler ending a job) sends SIGTERM and, some time
later, SIGKILL. SIGTERM's default action ends the process at once, losing every step since
the last checkpoint. While a run in a workdir is in its loop, ``Preemption`` (a loop hook
and the loop's ``stop`` test) replaces that action: the handler only sets a flag; after the
step in flight, ``run_loop`` makes that step a save boundary, the checkpoint hook saves it
(``Boundary.stop``: saved even off the checkpoint schedule), the hooks close (an async save
is waited for), and ``sbjax.train.train`` logs

    preempted (SIGTERM): saved step S in WORKDIR; rerun the same command to resume

and raises ``Preempted``, a ``SystemExit`` with status ``EXIT_PREEMPTED`` = 75 (``EX_TEMPFAIL``
of sysexits.h: "try again"), so that a scheduler that retries failed jobs retries it and an
in-process caller (a sweep, ``reproduce``) stops as SIGTERM asked rather than going on. The
rerun resumes from step S bit for bit (batch i is a pure function of (data_seed, i)).

Multi-process runs (``jax.process_count() > 1``) must stop at the same step on every host:
there the decision is JAX's preemption sync point
(``multihost_utils.reached_preemption_sync_point``, fed by the coordination service's own
SIGTERM notifier), and no Python handler is installed. A handler is installed only from the
main thread; the previous handler is restored when the loop ends.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import jax

from sbjax.train.loop import Boundary, Hook

log = logging.getLogger("sbjax")

EXIT_PREEMPTED = 75  # sysexits.h EX_TEMPFAIL
_deadline: list = [None]  # a time budget (``set_deadline``): the same stop as SIGTERM


def set_deadline(t: float | None) -> None:
  """Stop every run at its first step boundary after the time ``t`` (``time.time()``), as
  SIGTERM does: save that step, exit 75; the same command again resumes (None: no budget)."""
  _deadline[0] = t


class Preempted(SystemExit):
  """The run saved its checkpoint after SIGTERM and stops (exit status 75)."""

  def __init__(self, step: int, where: str):
    super().__init__(EXIT_PREEMPTED)
    self.step, self.where = step, where
    budget = _deadline[0] is not None and time.time() >= _deadline[0]
    self.why = "time budget reached" if budget else "preempted (SIGTERM)"

  def __str__(self) -> str:
    return f"{self.why}: saved step {self.step} in {self.where}; rerun the same command to resume"


class Preemption(Hook):
  """The SIGTERM flag (module doc). ``preemption(step)`` is the loop's ``stop`` test;
  ``saved_step`` is the step saved at the stop boundary (None if the run was not stopped)."""

  def __init__(self, signals=(signal.SIGTERM,)):
    self.signals = tuple(signals)
    self.requested = False
    self.saved_step = None
    self._old: dict = {}
    self.multi = jax.process_count() > 1

  def _handle(self, signum, frame) -> None:
    del frame
    if not self.requested:
      self.requested = True
      log.warning("%s received: saving a checkpoint after the current step",
                  signal.Signals(signum).name)

  def begin(self, state, start: int, end: int) -> None:
    if self.multi or threading.current_thread() is not threading.main_thread():
      return
    for sig in self.signals:
      self._old[sig] = signal.signal(sig, self._handle)

  def __call__(self, step: int) -> bool:
    if self.multi:
      from jax.experimental import multihost_utils  # deferred: multi-process runs only

      try:
        return bool(multihost_utils.reached_preemption_sync_point(step))
      except RuntimeError:  # no preemption sync manager (jax.distributed without it)
        return False
    return self.requested or (_deadline[0] is not None and time.time() >= _deadline[0])

  def on_boundary(self, b: Boundary, state) -> None:
    if b.stop:
      self.saved_step = b.step

  def close(self) -> None:
    for sig, old in self._old.items():
      signal.signal(sig, old)
    self._old = {}
