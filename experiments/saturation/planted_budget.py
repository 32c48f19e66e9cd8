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


from sbjax.train.loop import Hook

from ..shared import BudgetClock, BudgetExit as OverBudget

WARMUP = 10


def projected_end(now: float, t_start: float, n: int, steps_left: int) -> tuple[float, float]:
  """(seconds per step, projected end) of ``steps_left`` more steps at the rate of the ``n``
  steps timed since ``t_start`` (all times in seconds since the run began)."""
  per_step = (now - t_start) / n
  return per_step, now + per_step * steps_left


class Clock(BudgetClock):
  """The run's start, budget and slowest seconds per member-token seen so far
  (``experiments.shared.BudgetClock``; a stop raises this module's ``OverBudget``)."""

  def __init__(self, budget_s: float, estimate_at: int):
    super().__init__(budget_s, estimate_at, over=OverBudget, unit="population")


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
      c.estimate(self.name, per_step, self.mt, self.end, end,
                 f"stopped after {i + 1} steps (its checkpoints so far are kept); rerun the "
                 "same command to resume, or use a smaller preset")
