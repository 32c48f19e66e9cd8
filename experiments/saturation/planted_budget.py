"""The time budget of the planted arms' device presets (``Knobs.budget_s``, issue 32), as
``experiments/collapse/budget.py`` does it for the collapse groups.

A population's training is timed by a loop hook (the device sampler draws its batches
inside the jitted step, so no batch passes through the host to be timed): when the loop
reports step ``w`` (w = 10 warm-up steps, compiles included before them) the clock starts,
and at step ``w + n`` (n = ``Knobs.estimate_at``) the population's remaining time is
projected from those n steps, then its measurement (``planted_run`` measures every
checkpoint of every member once the population has trained: a load, a forward on the
validation windows and an SVD each) at the slowest rate seen in this call,

  t_end = now + (end − w − n − 1) · (elapsed over the n steps) / n + C · M · r,

C the checkpoints each member saves (``sbjax.checkpoint.checkpoint_steps``), M the members,
r the slowest seconds per member-checkpoint measured so far in this call (``Clock.measured``,
timed around each population's measurement, the floors' fit excluded), and printed on stderr:

  estimate: population d128: 14377 steps, 0.012 s/step, ends at ~190 s of the run (now 12 s);
  training ends ~170 s, then its 104 member-checkpoints are measured in ~20 s (0.19 s each,
  the slowest rate seen in this call)

(one line). Before any population has been measured in the call, r is unknown: the line says
"measurement of its C·M member-checkpoints not projected yet: no population measured so far in
this call" and t_end is the training's end.

If it would end past ``budget_s`` (seconds since the run began) the population stops there
(``OverBudget``, a ``SystemExit`` with status 75, as a preemption): its workdirs keep the
checkpoints saved so far (a rerun of the same command resumes from the newest step all of
them hold, ``sbjax.checkpoint.restore_latest_common``), and the finished populations are
measured and reported before the stop. Before a population starts, one that cannot fit what is
left, its training at the slowest seconds per member-token seen so far (times its
member-tokens) plus its measurement at r, is not started. The floors are not projected.
"""

from __future__ import annotations

import sys

from sbjax.train.loop import Hook

from ..shared import BudgetClock, BudgetExit as OverBudget

WARMUP = 10


def projected_end(now: float, t_start: float, n: int, steps_left: int) -> tuple[float, float]:
  """(seconds per step, projected end) of ``steps_left`` more steps at the rate of the ``n``
  steps timed since ``t_start`` (all times in seconds since the run began)."""
  per_step = (now - t_start) / n
  return per_step, now + per_step * steps_left


class Clock(BudgetClock):
  """The run's start, budget, slowest seconds per member-token and slowest seconds per
  member-checkpoint measured (``s_per_measure``, 0 until a population is measured) seen so
  far (``experiments.shared.BudgetClock``; a stop raises this module's ``OverBudget``)."""

  def __init__(self, budget_s: float, estimate_at: int):
    super().__init__(budget_s, estimate_at, over=OverBudget, unit="population")
    self.s_per_measure = 0.0

  def measured(self, count: int, seconds: float) -> None:
    """Learn the measurement rate: ``count`` member-checkpoints measured in ``seconds`` (those
    read from the measurement cache are not counted: ``planted_measure.measure_arm``)."""
    if count > 0:
      self.s_per_measure = max(self.s_per_measure, seconds / count)

  def measure_need(self, count: int) -> float | None:
    """Seconds to measure ``count`` member-checkpoints at the slowest rate seen; None before
    any population was measured in this call (the rate is unknown)."""
    return self.s_per_measure * count if self.s_per_measure > 0 else None

  def check_start(self, name: str, member_tokens: int, measures: int = 0) -> None:
    """Refuse to start a population whose training (slowest s per member-token so far) plus
    measurement of its ``measures`` member-checkpoints cannot fit what is left."""
    train, meas = self.s_per_token * member_tokens, self.measure_need(measures) or 0.0
    left = self.budget_s - self.elapsed()
    if self.budget_s and train + meas > left:
      raise self.over(f"population {name} needs ~{train + meas:.0f} s (training ~{train:.0f} "
                      f"s + measuring {measures} member-checkpoints ~{meas:.0f} s), "
                      f"{left:.0f} s of the {self.budget_s:g} s budget are left: stopped "
                      "before it; rerun the same command to resume (finished populations "
                      "are kept)")

  def estimate(self, name: str, per_step: float, member_tokens_per_step: int, steps: int,
               end: float, stop_text: str, measures: int = 0) -> None:
    """``BudgetClock.estimate`` with the population's measurement added to ``end`` (the
    training's projected end), when its rate is known (module doc)."""
    self.s_per_token = max(self.s_per_token, per_step / member_tokens_per_step)
    meas = self.measure_need(measures)
    total = end + (meas or 0.0)
    self.estimates[name] = {"s_per_step": per_step, "steps": steps,
                            "projected_end_s": round(total, 1), "train_end_s": round(end, 1),
                            "measures": measures,
                            "measure_s": None if meas is None else round(meas, 1),
                            "s_per_measure": self.s_per_measure or None}
    print(f"estimate: population {name}: {steps} steps, {per_step:.4g} s/step, ends at "
          f"~{total:.0f} s of the run (now {self.elapsed():.0f} s); "
          f"{measure_text(self.estimates[name])}", file=sys.stderr, flush=True)
    if self.on_estimate is not None:
      self.on_estimate()
    if self.budget_s and total > self.budget_s:
      raise self.over(f"population {name} would end at ~{total:.0f} s, past the "
                      f"{self.budget_s:g} s budget: {stop_text}")


def measure_text(e: dict) -> str:
  """What an estimate (``Clock.estimates``' value) says of the measurement; '' for an
  estimate recorded before the measurement was projected (session 17's folders)."""
  if "measures" not in e:
    return ""
  if e.get("measure_s") is None:
    return (f"measurement of its {e['measures']} member-checkpoints not projected yet: no "
            "population measured so far in this call")
  return (f"training ends ~{e['train_end_s']:.0f} s, then its {e['measures']} "
          f"member-checkpoints are measured in ~{e['measure_s']:.0f} s "
          f"({e['s_per_measure']:.3g} s each, the slowest rate seen in this call)")


class Watch(Hook):
  """The loop hook of one population (module doc); ``measures``: its member-checkpoints."""

  def __init__(self, clock: Clock, name: str, member_tokens_per_step: int, measures: int = 0):
    self.clock, self.name, self.mt, self.measures = clock, name, member_tokens_per_step, measures
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
                 "same command to resume, or use a smaller preset", measures=self.measures)
