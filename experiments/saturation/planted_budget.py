"""The time budget of the planted arms' device presets (``Knobs.budget_s``, issue 32), as
``experiments/collapse/budget.py`` does it for the collapse groups.

A population's training is timed by a loop hook (the device sampler draws its batches
inside the jitted step, so no batch passes through the host to be timed): when the loop
reports step ``w`` (w = 10 warm-up steps, compiles included before them) the clock starts,
and at step ``w + n`` (n = ``Knobs.estimate_at``) the population's remaining time is
projected from those n steps. Then (``probe``, given by ``planted_run``) a probe of its own
measurement runs: up to 3 checkpoints of its first member that training has already saved
and finalized are measured (``planted_measure.probe_arm``: a load, a forward on the
validation windows and an SVD each, into the member's measurement cache, so the measurement
after training reads them back instead of measuring them again), timed apart from the n steps.
The projected end is

  t_end = now + p + (end − w − n − 1) · (elapsed over the n steps) / n + M · u + R · s,

p the probe's seconds (spent now, between two steps; they do not enter the step rate), M the
members, u the measurer's set-up per member (the language's probabilities to the device, the
Γ table), R = C · M − k − c the member-checkpoints left to measure after training (C the
checkpoints each member saves, ``sbjax.checkpoint.checkpoint_steps``; k probed now; c already
in the first member's cache from an earlier call's probe), s the steady seconds per
member-checkpoint: the mean of the probed checkpoints after the first. The first probed
checkpoint's time minus s is the measurement's compile (``compile_s`` in the record): it is
spent once, in the probe, and not counted again, because the measurement after training runs
under an equal mesh (``planted_measure.measure_mesh``) and reuses the probe's compile (the
mesh is part of jit's cache key; before session 19 it ran outside the mesh and compiled
again: gpu-planted-test on CPU, the probe's first checkpoint 2.11 s, the first one after
training 2.40 s, the others ~0.08 s). With one checkpoint probed, s is its time, compile
included (an upper bound). If nothing can be probed (no finalized checkpoint not cached, or
the probe met a checkpoint it could not read: ``Probe.damaged``, warned in one line), s falls
back to r, the slowest seconds per member-checkpoint measured so far in this call
(``Clock.measured``, timed around each population's measurement after its training), with
R = C · M and no set-up term; before any population was measured, the measurement is not
projected. The estimate is printed on stderr (one line):

  estimate: population d128: 14377 steps, 0.012 s/step, ends at ~190 s of the run (now 12 s);
  training ends ~170 s (the probe's 2.1 s included), then its 101 member-checkpoints left
  (of 104: 3 probed, 0 cached) are measured in ~21 s, from a probe of d128-wd0.1-bf16:
  checkpoints 0, 1, 2 in 2 s (the first 1.5 s, its compile reused after training; then
  0.19 s each; set-up 0.1 s per member)

and recorded (``Clock.estimates``: ``measure_from`` "probe", "slowest rate" or None, the
probe's record, and ``floor_s``: the seconds of the floors computed for the population just
before its training, already in ``now``).

The floors (``planted_floor``: the svd bound or the fit, once per language, kept in OUT for
later calls) are computed before the training of the first population of their language, so
their seconds are spent and measured on this clock before that population's start check and
its estimate see what is left; when they leave none of the budget (``Clock.after_floors``)
the call stops there, as any budget stop, and a rerun reads them back from OUT.

If it would end past ``budget_s`` (seconds since the run began) the population stops there
(``OverBudget``, a ``SystemExit`` with status 75, as a preemption): its workdirs keep the
checkpoints saved so far (a rerun of the same command resumes from the newest step all of
them hold, ``sbjax.checkpoint.restore_latest_common``), and the finished populations are
measured and reported before the stop. Before a population starts, one that cannot fit what is
left, its training at the slowest seconds per member-token seen so far (times its
member-tokens) plus its measurement at r, is not started (after its language's floors, when
they were computed for it).
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
  """The run's start, budget, slowest seconds per member-token and slowest seconds per
  member-checkpoint measured (``s_per_measure``, 0 until a population is measured) seen so
  far (``experiments.shared.BudgetClock``; a stop raises this module's ``OverBudget``)."""

  def __init__(self, budget_s: float, estimate_at: int):
    super().__init__(budget_s, estimate_at, over=OverBudget, unit="population")
    self.s_per_measure, self.floor_s = 0.0, {}  # floor_s: population -> its floors' seconds

  def after_floors(self, name: str, seconds: float, where: str) -> None:
    """The floors computed for population ``name``'s language just before it (``seconds``,
    kept in ``where``) are spent: stop before the population when they leave none of the
    budget (its start check follows, with what is left)."""
    self.floor_s[name] = seconds
    if self.budget_s and self.elapsed() >= self.budget_s:
      raise self.over(f"the floors of {self.unit} {name}'s language took {seconds:.0f} s and "
                      f"the {self.budget_s:g} s budget is spent (now {self.elapsed():.0f} s): "
                      f"stopped before {name}; the floors are kept in {where}: rerun the same "
                      "command to resume")

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
    super().check_start(name, member_tokens, meas, f" (training ~{train:.0f} s + measuring "
                        f"{measures} member-checkpoints ~{meas:.0f} s)")

  def estimate(self, name: str, per_step: float, member_tokens_per_step: int, steps: int,
               end: float, stop_text: str, measures: int = 0, members: int = 1,
               probe=None, probe_s: float = 0.0) -> None:
    """``BudgetClock.estimate`` with the population's measurement added to ``end`` (the
    training's projected end, the probe's ``probe_s`` seconds included): from the ``probe``
    (a ``planted_measure.Probe``) when it measured anything, else at the slowest rate
    measured in this call when one is known (module doc)."""
    got = probe_need(probe, measures, members) if probe is not None else None
    meas, rec = got if got is not None else (self.measure_need(measures), None)
    super().estimate(name, per_step, member_tokens_per_step, steps, end, stop_text,
                     after_s=meas or 0.0, note=measure_text, record={
                         "train_end_s": round(end, 1), "measures": measures,
                         "measure_s": None if meas is None else round(meas, 1),
                         "s_per_measure": self.s_per_measure or None,
                         "measure_from": ("probe" if rec else "slowest rate" if meas is not None
                                          else None),
                         "probe": rec, "probe_s": None if probe is None else round(probe_s, 3),
                         "probe_damaged": getattr(probe, "damaged", None),
                         "floor_s": round(self.floor_s.get(name, 0.0), 1)})


def probe_need(probe, measures: int, members: int) -> tuple[float, dict] | None:
  """(seconds, record) of what is left of a population's measurement of ``measures``
  member-checkpoints (``members`` members) after ``probe`` (a ``planted_measure.Probe``:
  member, steps, setup_s, times, cached), M · u + R · s (module doc: the compile in the
  first probed checkpoint is reused after training); None when it measured nothing."""
  k = len(probe.times)
  if k == 0:
    return None
  steady = sum(probe.times[1:]) / (k - 1) if k > 1 else probe.times[0]
  left = max(measures - k - probe.cached, 0)
  need = members * probe.setup_s + left * steady
  return need, {"member": probe.member, "steps": list(probe.steps),
                "seconds": round(probe.setup_s + sum(probe.times), 3),
                "setup_s": round(probe.setup_s, 3), "first_s": round(probe.times[0], 3),
                "steady_s": round(steady, 4) if k > 1 else None,
                "compile_s": round(probe.times[0] - steady, 3) if k > 1 else None,
                "cached": probe.cached, "left": left}


def measure_text(e: dict) -> str:
  """What an estimate (``Clock.estimates``' value) says of the measurement and of the floors
  computed before the population; '' for an estimate recorded before the measurement was
  projected (session 17's folders)."""
  if "measures" not in e:
    return ""
  floors = (f"; the floors of its language took {e['floor_s']:.3g} s just before its training "
            "(spent: in 'now')" if e.get("floor_s") else "")
  return _measure_part(e) + floors


def _measure_part(e: dict) -> str:
  none = ("" if e.get("probe_s") is None else f"; the probe could not read {e['probe_damaged']}"
          if e.get("probe_damaged") else "; no checkpoint to probe")
  if e.get("measure_s") is None:
    return (f"measurement of its {e['measures']} member-checkpoints not projected yet: no "
            f"population measured so far in this call{none}")
  p = e.get("probe")
  if not p:
    return (f"training ends ~{e['train_end_s']:.0f} s, then its {e['measures']} "
            f"member-checkpoints are measured in ~{e['measure_s']:.0f} s "
            f"({e['s_per_measure']:.3g} s each, the slowest rate seen in this call{none})")
  steps = ", ".join(str(s) for s in p["steps"])
  each = (f"the first {p['first_s']:.3g} s, its compile reused after training; then "
          f"{p['steady_s']:.3g} s each" if p["steady_s"] is not None else
          "its time, compile included, counted for each")
  return (f"training ends ~{e['train_end_s']:.0f} s (the probe's {e.get('probe_s', 0):.2g} s "
          f"included), then its {p['left']} member-checkpoints left (of {e['measures']}: "
          f"{len(p['steps'])} probed, {p['cached']} cached) are measured in "
          f"~{e['measure_s']:.0f} s, from a probe of {p['member']}: checkpoint"
          f"{'s' if len(p['steps']) > 1 else ''} {steps} in {p['seconds']:.3g} s ({each}; "
          f"set-up {p['setup_s']:.2g} s per member)")


class Watch(Hook):
  """The loop hook of one population (module doc); ``measures``: its member-checkpoints,
  ``members`` its members, ``probe``: a callable returning a ``planted_measure.Probe`` of
  its first member's measurement (None: no probe, the slowest rate measured so far)."""

  def __init__(self, clock: Clock, name: str, member_tokens_per_step: int, measures: int = 0,
               members: int = 1, probe=None):
    self.clock, self.name, self.mt, self.measures = clock, name, member_tokens_per_step, measures
    self.members, self.probe = members, probe
    self.t, self.end, self.first = None, 0, None

  def begin(self, state, start: int, end: int) -> None:
    self.first, self.end = start + WARMUP, end

  def on_step(self, i: int, metrics: dict) -> None:
    c, n = self.clock, self.clock.estimate_at
    if i == self.first:
      self.t = c.elapsed()
    elif self.t is not None and i == self.first + n:
      now = c.elapsed()  # the n steps' end: the probe is timed apart, then added
      per_step, end = projected_end(now, self.t, n, self.end - i - 1)
      probe = self.probe() if self.probe is not None else None
      spent = c.elapsed() - now
      c.estimate(self.name, per_step, self.mt, self.end, end + spent,
                 f"stopped after {i + 1} steps (its checkpoints so far are kept); rerun the "
                 "same command to resume, or use a smaller preset", measures=self.measures,
                 members=self.members, probe=probe, probe_s=spent)
