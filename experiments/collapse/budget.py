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

import sys
import time

WARMUP = 10


class OverBudget(RuntimeError):
  """The run stopped cleanly before its budget ran out (a rerun resumes)."""


class Clock:
  """The run's start, budget and slowest seconds per member-token seen so far."""

  def __init__(self, budget_s: float, estimate_at: int):
    self.t0, self.budget_s, self.estimate_at = time.perf_counter(), float(budget_s), estimate_at
    self.s_per_token = 0.0

  def elapsed(self) -> float:
    return time.perf_counter() - self.t0

  def check_start(self, name: str, member_tokens: int) -> None:
    """Refuse to start a group that the slowest rate so far says cannot fit."""
    need = self.s_per_token * member_tokens
    if self.budget_s and self.elapsed() + need > self.budget_s:
      raise OverBudget(f"group {name} needs ~{need:.0f} s, {self.budget_s - self.elapsed():.0f}"
                       f" s of the {self.budget_s:g} s budget are left: stopped before it; "
                       "rerun the same command to resume (finished groups are kept)")


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
      c.s_per_token = max(c.s_per_token, per_step / self._mt)
      end = c.elapsed() + per_step * (self._steps - i)
      print(f"estimate: group {self._name}: {self._steps} steps, {per_step:.4g} s/step, "
            f"ends at ~{end:.0f} s of the run (now {c.elapsed():.0f} s)", file=sys.stderr,
            flush=True)
      if c.budget_s and end > c.budget_s:
        raise OverBudget(f"group {self._name} would end at ~{end:.0f} s, past the "
                         f"{c.budget_s:g} s budget: stopped after {i} steps (nothing of it "
                         "kept); finished groups are kept, rerun to resume, or use a smaller "
                         "preset")
    return self._ds.train_batch(i)


def watch(datasets: list, clock: Clock | None, name: str, steps: int, member_tokens: int):
  """``datasets`` with member 0's timed (``clock`` None: unchanged)."""
  if clock is None or steps <= WARMUP + clock.estimate_at:
    return datasets
  return [Watched(datasets[0], clock, name, steps, member_tokens)] + list(datasets[1:])
