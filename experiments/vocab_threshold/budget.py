"""The time budget of vocab_threshold's device preset (``Knobs.budget_s``, issue 32), as the
saturation and collapse device presets have it (``experiments.shared.BudgetClock``).

Every run or population the sweeps are about to train (a trunk, a population of padded
heads) is timed by a loop hook: when the loop reports step ``s + w`` (s = the start step, w =
``Knobs.estimate_warmup`` steps, compiles included before them) the clock starts, and at step
``s + w + n`` (n = ``Knobs.estimate_at``) its remaining time is projected from those n steps,

  t_end = now + (end − s − w − n − 1) · (elapsed over the n steps) / n,

and printed on stderr:

  estimate: run V1024/full-dense-lr0.001: 1200 steps, 0.05 s/step, ends at ~70 s of the run (now 14 s)

If it would end past ``budget_s`` (seconds since the run began) it stops there
(``OverBudget``, a ``SystemExit`` with status 75, as a preemption): its workdirs keep the
checkpoints saved so far, the finished runs keep their DONE marks, and a rerun of the same
command resumes (``sbjax.studies.rank_sweep``). Before a run starts, one that cannot fit
what is left at the slowest rate seen so far (seconds per member-token, times its
member-tokens) is not started. The measurements after each V (r*, the n-gram fits) are not
projected.

Each estimate (s/step, the run's steps, its projected end in seconds since the call began) is
kept in ``Clock.estimates`` and, through ``BudgetClock.on_estimate``, written at once into
vocab_threshold_meta.json (run.py): a stop, a cut-off or a kill after it keeps it for the
report.
"""

from __future__ import annotations

import time
from typing import Callable

from sbjax.checkpoint import list_steps
from sbjax.train.loop import Hook

from ..shared import BudgetClock, BudgetExit as OverBudget


class Clock(BudgetClock):
  """The run's start, budget and slowest seconds per member-token seen so far; a stop raises
  ``OverBudget``. ``warmup``: the steps not timed at the start of each run; ``now``: the
  clock, in seconds (a test may pass its own to stop at a chosen point)."""

  def __init__(self, budget_s: float, estimate_at: int, warmup: int,
               now: Callable[[], float] = time.perf_counter):
    super().__init__(budget_s, estimate_at, over=OverBudget, unit="run")
    self.warmup, self.now = warmup, now
    self.t0 = now()

  def elapsed(self) -> float:
    return self.now() - self.t0

  def hooks(self, prefix: str):
    """``rank_sweep.run_plan``'s ``hooks(name, cfgs, dirs)``: the start check and a ``Watch``
    of the run (``prefix`` names the sweep, e.g. ``V1024/``)."""

    def make(name: str, cfgs: list, dirs: list) -> list:
      tc = cfgs[0].train
      member_tokens = tc.batch_size * tc.seq_len * len(cfgs)
      done = min(_steps_done(d) for d in dirs)
      self.check_start(prefix + name, (tc.steps - done) * member_tokens)
      return [Watch(self, prefix + name, member_tokens)]

    return make


def _steps_done(wd) -> int:
  steps = list_steps(wd) if wd.exists() else []
  return steps[-1] if steps else 0


class Watch(Hook):
  """The loop hook of one run or population (module doc)."""

  def __init__(self, clock: Clock, name: str, member_tokens_per_step: int):
    self.clock, self.name, self.mt = clock, name, member_tokens_per_step
    self.t, self.end, self.first = None, 0, None

  def begin(self, state, start: int, end: int) -> None:
    self.first, self.end = start + self.clock.warmup, end

  def on_step(self, i: int, metrics: dict) -> None:
    c, n = self.clock, self.clock.estimate_at
    if i == self.first:
      self.t = c.elapsed()
    elif self.t is not None and i == self.first + n:
      per_step = (c.elapsed() - self.t) / n
      end = c.elapsed() + per_step * (self.end - i - 1)
      c.estimate(self.name, per_step, self.mt, self.end, end,
                 f"stopped after {i + 1} steps (its checkpoints so far are kept); rerun the "
                 "same command to resume, or use a smaller preset")
