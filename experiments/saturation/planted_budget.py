"""The time budget of the planted arms' device presets (``Knobs.budget_s``, issue 32), as
``experiments/collapse/budget.py`` does it for the collapse groups.

A population's training is timed by a loop hook (the device sampler draws its batches
inside the jitted step, so no batch passes through the host to be timed): when the loop
reports step ``w`` (w = 10 warm-up steps, compiles included before them) the clock starts,
and at step ``w + n`` (n = ``Knobs.estimate_at``) the population's remaining time is
projected from those n steps,

  t_end = now + (end − w − n − 1) · (elapsed over the n steps) / n,

and printed on stderr:

  estimate: population d128: 14377 steps, 0.012 s/step, ends at ~170 s of the run (now 12 s)

If it would end past ``budget_s`` (seconds since the run began) the population stops there
(``OverBudget``, a ``SystemExit`` with status 75, as a preemption): its workdirs keep the
checkpoints saved so far (a rerun of the same command resumes from the newest step all of
them hold, ``sbjax.checkpoint.restore_latest_common``), and the finished populations are
measured and reported before the stop. Before a population starts, one that cannot fit what is
left at the slowest rate seen so far (seconds per member-token, times its member-tokens) is
not started. The measurement of the checkpoints and the floors are not projected.
"""

from __future__ import annotations

import sys
import time

from sbjax.train.loop import Hook
from sbjax.train.preempt import EXIT_PREEMPTED

WARMUP = 10


class OverBudget(SystemExit):
  """The run stopped cleanly before its budget ran out (exit status 75; a rerun resumes)."""

  def __init__(self, message: str):
    super().__init__(EXIT_PREEMPTED)
    self.message = message

  def __str__(self) -> str:
    return self.message


def projected_end(now: float, t_start: float, n: int, steps_left: int) -> tuple[float, float]:
  """(seconds per step, projected end) of ``steps_left`` more steps at the rate of the ``n``
  steps timed since ``t_start`` (all times in seconds since the run began)."""
  per_step = (now - t_start) / n
  return per_step, now + per_step * steps_left


class Clock:
  """The run's start, budget and slowest seconds per member-token seen so far."""

  def __init__(self, budget_s: float, estimate_at: int):
    self.t0, self.budget_s, self.estimate_at = time.perf_counter(), float(budget_s), estimate_at
    self.s_per_token = 0.0
    self.estimates: dict = {}  # population -> {"s_per_step", "steps", "projected_end_s"}

  def elapsed(self) -> float:
    return time.perf_counter() - self.t0

  def check_start(self, name: str, member_tokens: int) -> None:
    """Refuse to start a population that the slowest rate so far says cannot fit."""
    need = self.s_per_token * member_tokens
    if self.budget_s and self.elapsed() + need > self.budget_s:
      raise OverBudget(f"population {name} needs ~{need:.0f} s, "
                       f"{self.budget_s - self.elapsed():.0f} s of the {self.budget_s:g} s "
                       "budget are left: stopped before it; rerun the same command to resume "
                       "(finished populations are kept)")


class Watch(Hook):
  """The loop hook of one population (module doc)."""

  def __init__(self, clock: Clock, name: str, member_tokens_per_step: int):
    self.clock, self.name, self.mt = clock, name, member_tokens_per_step
    self.t, self.end, self.first = None, 0, None

  def begin(self, state, start: int, end: int) -> None:
    self.first, self.end = start + WARMUP, end

  def on_step(self, i: int, metrics: dict) -> None:
    c, n = self.clock, self.clock.estimate_at
    if i == self.first:
      self.t = c.elapsed()
    elif self.t is not None and i == self.first + n:
      per_step, end = projected_end(c.elapsed(), self.t, n, self.end - i - 1)
      c.s_per_token = max(c.s_per_token, per_step / self.mt)
      c.estimates[self.name] = {"s_per_step": per_step, "steps": self.end,
                                "projected_end_s": round(end, 1)}
      print(f"estimate: population {self.name}: {self.end} steps, {per_step:.4g} s/step, "
            f"ends at ~{end:.0f} s of the run (now {c.elapsed():.0f} s)", file=sys.stderr,
            flush=True)
      if c.budget_s and end > c.budget_s:
        raise OverBudget(f"population {self.name} would end at ~{end:.0f} s, past the "
                         f"{c.budget_s:g} s budget: stopped after {i + 1} steps (its checkpoints "
                         "so far are kept); rerun the same command to resume, or use a smaller "
                         "preset")
