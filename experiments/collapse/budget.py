"""The time budget of a collapse run (``Knobs.budget_s``, issue 32's device presets).

A group's training is timed through its batches: member 0's dataset is wrapped, and when
the loop asks for batch ``w + n`` (w = 10 warm-up steps, compiles included before them,
n = ``Knobs.estimate_at``) the group's remaining time is projected from those n steps,
t_end = now + (steps − w − n) · (elapsed over the n steps) / n, and printed (stderr):

  estimate: group seeds-L2-d256: 747 steps, 0.05 s/step, ends ~31 s after its start, run at 40 s

If the run would end past ``budget_s`` (seconds since ``run`` began) the group stops there
(``OverBudget``): finished groups are kept in OUT/groups/ and a rerun of the same command
resumes after them. Before a group starts, one that cannot fit what is left (the slowest
rate seen so far, per member-token, times its member-tokens) is not started. The wall time of
the collapse passes is not projected (a few seconds of a group's).
"""

from __future__ import annotations

import time

from ..shared import BudgetClock

WARMUP = 10


class OverBudget(RuntimeError):
  """The run stopped cleanly before its budget ran out (a rerun resumes)."""


class Clock(BudgetClock):
  """The run's start, budget and slowest seconds per member-token seen so far
  (``experiments.shared.BudgetClock``; a stop raises this module's ``OverBudget``)."""

  def __init__(self, budget_s: float, estimate_at: int):
    super().__init__(budget_s, estimate_at, over=OverBudget, unit="group")


class Watched:
  """A dataset whose ``train_batch`` times the loop (module doc); the rest passes through."""

  def __init__(self, ds, clock: Clock, name: str, steps: int, member_tokens_per_step: int):
    self._ds, self._clock, self._name, self._steps = ds, clock, name, steps
    self._mt, self._t = member_tokens_per_step, None

  def __getattr__(self, attr):
    return getattr(self._ds, attr)

  def train_batch(self, i):
    n, c = self._clock.estimate_at, self._clock
    if i == WARMUP:
      self._t = time.perf_counter()
    elif i == WARMUP + n and self._t is not None:
      per_step = (time.perf_counter() - self._t) / n
      c.estimate(self._name, per_step, self._mt, self._steps,
                 c.elapsed() + per_step * (self._steps - i),
                 f"stopped after {i} steps (nothing of it kept); finished groups are kept, "
                 "rerun to resume, or use a smaller preset")
    return self._ds.train_batch(i)


def watch(datasets: list, clock: Clock | None, name: str, steps: int, member_tokens: int):
  """``datasets`` with member 0's timed (``clock`` None: unchanged)."""
  if clock is None or steps <= WARMUP + clock.estimate_at:
    return datasets
  return [Watched(datasets[0], clock, name, steps, member_tokens)] + list(datasets[1:])
