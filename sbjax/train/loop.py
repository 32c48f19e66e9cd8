"""The one training loop: ``run_loop(state, step_fn, batches, start, end, hooks)``.

Each step ``i`` is dispatched asynchronously; its metrics are read on the host one step late
(after step ``i + 1`` is dispatched), except at a *boundary*: after step ``s = i + 1`` when
``Schedule.boundary`` (the one place that decides them) says ``s`` is a save step, an eval
step or the last step. There the pending metrics are read first, then every hook's
``on_boundary`` runs in order (evaluation before the checkpoint). ``stop(s)`` (optional; the
SIGTERM flag of ``sbjax.train.preempt``) true makes ``s`` the last boundary, a save.

Hooks see host metrics as numpy: scalars for one run, arrays with a leading member axis for N
members. A hook may set ``metrics["skip"]`` (per member) to keep later hooks from logging it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Container, NamedTuple, Sequence

import jax


class Boundary(NamedTuple):
  step: int  # the number of steps done
  eval: bool
  save: bool
  last: bool
  stop: bool = False  # an early stop asked for (SIGTERM): save this step even off schedule


@dataclasses.dataclass(frozen=True)
class Schedule:
  """Which steps are boundaries. ``save_steps``: checkpoint steps (a container: tested, never
  listed); ``eval_every``: evaluate every that many steps (0: never); ``final_step``:
  evaluated too; ``at_start``: a boundary before the first step (a fresh run's step 0)."""

  save_steps: Container[int] = frozenset()
  eval_every: int = 0
  final_step: int | None = None
  at_start: bool = False

  def boundary(self, s: int, end: int) -> Boundary | None:
    ev = (self.eval_every > 0 and s % self.eval_every == 0) or s == self.final_step
    save = s in self.save_steps
    if ev or save or s == end:
      return Boundary(s, ev, save, s == end)
    return None

  def start(self, s: int, end: int) -> Boundary | None:
    return Boundary(s, True, s in self.save_steps, s == end) if self.at_start else None


class Hook:
  """A loop hook; every method is optional."""

  def begin(self, state, start: int, end: int) -> None:
    pass

  def on_step(self, i: int, metrics: dict) -> None:
    """Host metrics of step ``i`` (read one step late)."""

  def on_boundary(self, b: Boundary, state) -> None:
    pass

  def close(self) -> None:
    pass


def _report(hooks, pending) -> None:
  i, m = pending
  host = dict(jax.device_get(m))
  for h in hooks:
    h.on_step(i, host)


def _boundary(hooks, b: Boundary | None, state) -> None:
  if b is not None:
    for h in hooks:
      h.on_boundary(b, state)


def run_loop(state, step_fn: Callable, batches: Callable[[int], object], start: int, end: int,
             hooks: Sequence[Hook], schedule: Schedule = Schedule(),
             stop: Callable[[int], bool] | None = None):
  """Run steps ``start .. end - 1``: ``state, metrics = step_fn(state, batches(i))``, or
  fewer when ``stop(i + 1)`` is true (module doc). Returns the final state. Hooks are closed
  (in order) whether or not the loop raised."""
  try:
    for h in hooks:
      h.begin(state, start, end)
    _boundary(hooks, schedule.start(start, end), state)
    pending = None
    for i in range(start, end):
      state, m = step_fn(state, batches(i))
      if pending is not None:
        _report(hooks, pending)
      pending = (i, m)
      b = schedule.boundary(i + 1, end)
      if stop is not None and stop(i + 1):
        b = Boundary(i + 1, b is not None and b.eval, True, True, stop=True)
      if b is not None:
        _report(hooks, pending)
        pending = None
        _boundary(hooks, b, state)  # the last step is always a boundary: nothing pending
        if b.stop:
          break
  finally:
    for h in hooks:
      h.close()
  return state
