"""SIGTERM in the loop: the handler only sets a flag; ``run_loop`` then makes the
step in flight a saving stop boundary and ends there. The real run (a subprocess given
SIGTERM, resumed bitwise) is tests/e2e/test_sigterm_save_resumes_bitwise.py."""

import os
import signal

from sbjax.train.loop import Boundary, Hook, Schedule, run_loop
from sbjax.train.preempt import Preemption


class Recorder(Hook):
  def __init__(self):
    self.steps, self.boundaries, self.closed = [], [], False

  def on_step(self, i, m):
    self.steps.append(i)

  def on_boundary(self, b, state):
    self.boundaries.append(b)

  def close(self):
    self.closed = True


def _step(state, batch):
  return state + 1, {"loss": float(state)}


def test_stop_makes_the_step_in_flight_a_saving_last_boundary():
  rec = Recorder()
  sched = Schedule(save_steps=frozenset({0, 4, 10}), eval_every=5, final_step=10, at_start=True)
  state = run_loop(0, _step, lambda i: None, 0, 10, [rec], sched, stop=lambda s: s >= 3)
  assert state == 3 and rec.steps == [0, 1, 2] and rec.closed
  assert rec.boundaries == [Boundary(0, True, True, False),
                            Boundary(3, False, True, True, stop=True)]


def test_a_stop_on_an_eval_step_keeps_the_evaluation():
  rec = Recorder()
  sched = Schedule(eval_every=5, final_step=10)
  run_loop(0, _step, lambda i: None, 0, 10, [rec], sched, stop=lambda s: s == 5)
  assert rec.boundaries == [Boundary(5, True, True, True, stop=True)]


def test_sigterm_sets_the_flag_and_the_old_handler_comes_back():
  seen = []
  old = signal.signal(signal.SIGTERM, lambda *a: seen.append("old"))
  try:
    pre = Preemption()
    pre.begin(None, 0, 10)
    assert not pre(1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert pre(2) and seen == []  # the flag, not the old handler (nor the default: death)
    pre.on_boundary(Boundary(2, False, True, True, stop=True), None)
    assert pre.saved_step == 2
    pre.close()
    os.kill(os.getpid(), signal.SIGTERM)
    assert seen == ["old"]
  finally:
    signal.signal(signal.SIGTERM, old)

