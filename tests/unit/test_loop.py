"""The one training loop with a fake step: metrics are read one step late, boundaries come
from one place (Schedule), eval runs before the checkpoint of the same step, a stop makes the
step in flight a saving last boundary, and the hooks for 1 or N members (NaN policy, train
log, progress lines, the SIGTERM flag)."""

import io
import os
import signal

import numpy as np
import pytest

from sbjax.train import hooks as H
from sbjax.train import read_metrics
from sbjax.train.loop import Boundary, Hook, Schedule, run_loop
from sbjax.train.preempt import Preemption
from sbjax.train.step import TrainState
from sbjax.train.workdir import NonFiniteLossError


class Recorder(Hook):
  def __init__(self, events, name):
    self.events, self.name = events, name

  def on_step(self, i, m):
    self.events.append(("read", i))

  def on_boundary(self, b, state):
    self.events.append((self.name, b.step, b.eval, b.save) + (("stop",) if b.stop else ()))

  def close(self):
    self.events.append(("close", self.name))


def fake_step(events, losses=None):
  def step(state, batch):
    i = int(state.step)
    assert batch == 10 * i
    events.append(("step", i))
    loss = losses[i] if losses is not None else np.float32(1.0 / (i + 1))
    return (TrainState(state.step + 1, state.params, state.opt_state),
            {"loss": loss, "acc": np.float32(0.5), "grad_norm": np.float32(1.0),
             "ok": np.isfinite(loss)})
  return step


def _run(start, end, schedule, hooks_of, losses=None, stop=None):
  events = []
  state = TrainState(np.int32(start), {"w": np.zeros(2)}, ())
  out = run_loop(state, fake_step(events, losses), lambda i: 10 * i, start, end,
                 hooks_of(events), schedule, stop=stop)
  return events, out


def test_metrics_are_read_one_step_late_and_boundaries_drain_first():
  sched = Schedule(save_steps=frozenset({0, 2, 5}), eval_every=4, final_step=6, at_start=True)
  events, out = _run(0, 6, sched, lambda ev: [Recorder(ev, "eval"), Recorder(ev, "ckpt")])
  assert int(out.step) == 6
  assert events == [
      ("eval", 0, True, True), ("ckpt", 0, True, True),  # the start boundary (fresh run)
      ("step", 0), ("step", 1), ("read", 0), ("read", 0),  # read after step 1 is dispatched
      ("read", 1), ("read", 1), ("eval", 2, False, True), ("ckpt", 2, False, True),
      ("step", 2), ("step", 3), ("read", 2), ("read", 2),
      ("read", 3), ("read", 3), ("eval", 4, True, False), ("ckpt", 4, True, False),
      ("step", 4), ("read", 4), ("read", 4), ("eval", 5, False, True), ("ckpt", 5, False, True),
      ("step", 5), ("read", 5), ("read", 5), ("eval", 6, True, False), ("ckpt", 6, True, False),
      ("close", "eval"), ("close", "ckpt")]


def test_schedule_is_the_one_boundary_rule():
  s = Schedule(save_steps=frozenset({1, 8}), eval_every=5, final_step=12)
  assert s.boundary(3, 12) is None
  assert s.boundary(1, 12) == Boundary(1, False, True, False)
  assert s.boundary(10, 12) == Boundary(10, True, False, False)
  assert s.boundary(7, 7) == Boundary(7, False, False, True)  # stop_after: the last step
  assert s.boundary(12, 12) == Boundary(12, True, False, True)  # the final step is evaluated
  assert s.start(0, 12) is None and Schedule(at_start=True).start(0, 3).eval
  assert Schedule(save_steps=frozenset({3})).boundary(6, 9) is None  # eval_every=0: never
  events, _ = _run(3, 5, Schedule(eval_every=100, final_step=5), lambda ev: [Recorder(ev, "h")])
  assert events == [("step", 3), ("step", 4), ("read", 3), ("read", 4), ("h", 5, True, False),
                    ("close", "h")]  # a resumed loop: no start boundary


def test_a_stop_makes_the_step_in_flight_a_saving_last_boundary():
  sched = Schedule(save_steps=frozenset({0, 4, 10}), eval_every=5, final_step=10, at_start=True)
  events, out = _run(0, 10, sched, lambda ev: [Recorder(ev, "r")], stop=lambda s: s >= 3)
  assert int(out.step) == 3 and [e for e in events if e[0] == "r"] == [
      ("r", 0, True, True), ("r", 3, False, True, "stop")]
  events, _ = _run(0, 10, Schedule(eval_every=5, final_step=10), lambda ev: [Recorder(ev, "r")],
                   stop=lambda s: s == 5)
  assert [e for e in events if e[0] == "r"] == [("r", 5, True, True, "stop")]  # eval kept


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


def test_nan_policy_skips_then_stops_and_hooks_close():
  losses = [np.float32(v) for v in (1.0, np.nan, 0.5, np.inf)]
  ledger = H.Ledger([0], last_saved=0)
  seen = []

  class Log(Hook):
    def on_step(self, i, m):
      seen.append((i, m["skip"]))

  with pytest.raises(NonFiniteLossError, match="bad step 3 after 1 skipped; last good 0"):
    _run(0, 4, Schedule(), lambda ev: [
        H.NanPolicy(1, ledger, lambda j, i, m: f"bad step {i} after {ledger.skipped[j]} "
                    f"skipped; last good {ledger.last_saved[j]}"), Log(), Recorder(ev, "r")],
        losses=losses)
  assert seen == [(0, False), (1, True), (2, False)] and ledger.skipped == [1]


def test_members_train_log(tmp_path):
  """N members: one metrics.jsonl per member; a skipped member's record is left out."""
  dirs = [tmp_path / "m0", tmp_path / "m1"]
  for d in dirs:
    d.mkdir()
  records = H.Records(dirs)
  losses = [np.asarray([1.0, 2.0], np.float32), np.asarray([np.nan, 1.5], np.float32)]
  ledger = H.Ledger([0, 0])

  def step(state, batch):
    i = int(state.step)
    m = {"loss": losses[i], "acc": np.zeros(2, np.float32), "grad_norm": np.ones(2, np.float32),
         "ok": np.isfinite(losses[i])}
    return TrainState(state.step + 1, {"w": state.params["w"] + 1}, ()), m

  hooks = [H.NanPolicy(1, ledger, str),
           H.TrainLog(records, 1, [lambda i: 0.1, lambda i: 0.2], 8, [lambda s: 0.0] * 2),
           records]
  run_loop(TrainState(np.int32(0), {"w": np.zeros(3)}, ()), step, lambda i: None, 0, 2, hooks,
           Schedule(save_steps=frozenset({1, 2})))
  r0, r1 = read_metrics(dirs[0]), read_metrics(dirs[1])
  assert [r["step"] for r in r0] == [0] and [r["step"] for r in r1] == [0, 1]
  assert r1[1]["loss"] == 1.5 and r1[1]["lr"] == 0.2 and ledger.skipped == [1, 0]


class _Tty(io.StringIO):
  def isatty(self):
    return True


def test_progress_lines_off_a_terminal_a_bar_on_one():
  out = io.StringIO()  # not a terminal: log lines
  _run(0, 6, Schedule(), lambda ev: [H.Progress("run", 6, 2, min_interval=0.0, stream=out)])
  lines = out.getvalue().splitlines()
  assert "\r" not in out.getvalue()
  assert [ln.split(" loss")[0] for ln in lines] == ["[run] step 1/6", "[run] step 3/6",
                                                   "[run] step 5/6", "[run] step 6/6"]
  assert "(compiled) ETA ?" in lines[0] and lines[-1].endswith("ETA 0m00s")
  tty = _Tty()
  _run(4, 10, Schedule(), lambda ev: [H.Progress("run", 10, 2, stream=tty)])  # resumed at 5/10
  text = tty.getvalue()
  assert "\r" in text and "10/10" in text and "5/10" in text and "4/10" not in text
