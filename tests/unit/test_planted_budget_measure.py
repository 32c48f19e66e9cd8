"""The saturation device preset's budget clock with its measurement (``planted_budget``): a
population's projected end is its training's end (the probe's seconds included) plus its
measurement, projected from a probe of it (set-up per member + the member-checkpoints left at
the probe's steady rate; the compile, spent in the probe, is reused after training) or, with
nothing to probe or a probe that met an unreadable checkpoint, its member-checkpoints times the
slowest measurement rate seen in the call, which is unknown (and said so) before the first
population is measured; ``check_start`` refuses a population whose training fits what is
left but whose training and measurement do not; the floors computed before a population are
spent on the clock, and stop the call before it when they leave none of the budget. Pure
arithmetic on a fake clock and fake probe times."""

import pytest

from experiments.saturation import planted_budget as pb
from experiments.saturation.planted_measure import Probe
from experiments.saturation.planted_report import _budget_lines


class _Fake(pb.Clock):
  """The real clock with a hand-set "seconds since the run began"."""

  now = 0.0

  def elapsed(self) -> float:
    return self.now


def test_the_estimate_adds_the_measurement_once_its_rate_is_known(capsys):
  clock = _Fake(budget_s=450.0, estimate_at=4)
  written = []
  clock.on_estimate = lambda: written.append(dict(clock.estimates))
  hook = pb.Watch(clock, "d32", member_tokens_per_step=1000, measures=26 * 4)
  _estimate_at(clock, hook, 10.0, 12.0)  # 4 steps in 2 s; 500 − 15 steps left
  e = clock.estimates["d32"]
  assert (e["s_per_step"], e["train_end_s"]) == (0.5, 12.0 + 0.5 * 485)
  assert e["measure_s"] is None and e["s_per_measure"] is None and e["measures"] == 104
  assert e["projected_end_s"] == e["train_end_s"]  # nothing measured yet: training only
  err = capsys.readouterr().err
  assert "estimate: population d32: 500 steps, 0.5 s/step, ends at ~254 s" in err
  assert "measurement of its 104 member-checkpoints not projected yet" in err
  assert e["measure_from"] is None and e["probe"] is None and e["probe_s"] is None
  assert written == [clock.estimates]  # the meta writer saw the estimate before any stop
  clock.measured(104, 20.8)  # d32 measured: 0.2 s per member-checkpoint
  clock.measured(26, 2.6)  # a faster one: the slowest rate stays
  assert clock.s_per_measure == pytest.approx(0.2)
  hook = pb.Watch(clock, "d128", member_tokens_per_step=1000, measures=26 * 4)
  with pytest.raises(pb.OverBudget, match=r"would end at ~465 s, past the 450 s budget"):
    _estimate_at(clock, hook, 250.0, 252.0, end=400)  # training ends at 252 + 0.5 · 385 =
    # 444.5 s: it fits
  e = clock.estimates["d128"]
  assert e["train_end_s"] == 444.5 and e["measure_s"] == pytest.approx(20.8)
  assert e["projected_end_s"] == pytest.approx(444.5 + 20.8, abs=0.05)
  assert e["s_per_measure"] == pytest.approx(0.2)
  assert ("training ends ~444 s, then its 104 member-checkpoints are measured in ~21 s "
          "(0.2 s each, the slowest rate seen in this call)") in capsys.readouterr().err
  assert written[-1]["d128"] == e  # written before the stop


def test_an_unknown_rate_adds_nothing_a_known_one_stops():
  clock = _Fake(budget_s=450.0, estimate_at=4)
  clock.now = 404.0
  clock.estimate("a", 0.1, 1000, 300, 434.0, "stop", measures=100)  # rate unknown: fits
  clock.measured(100, 30.0)  # 0.3 s per member-checkpoint
  with pytest.raises(pb.OverBudget, match="population b would end at ~464 s"):
    clock.estimate("b", 0.1, 1000, 300, 434.0, "stop", measures=100)
  clock.measured(0, 5.0)  # nothing measured: the rate is unchanged
  assert clock.s_per_measure == pytest.approx(0.3)


def test_check_start_counts_the_measurement():
  clock = _Fake(budget_s=450.0, estimate_at=4)
  clock.now = 300.0  # 150 s left
  clock.check_start("d512", 10 ** 6, measures=104)  # no rate known yet: nothing refused
  clock.estimate("d32", 0.02, 1000, 500, 310.0, "stop", measures=104)  # 2e-5 s/member-token
  clock.measured(104, 20.8)  # 0.2 s per member-checkpoint
  clock.check_start("d512", 7 * 10 ** 6, measures=26)  # 140 + 5.2 s: fits in 150 s
  with pytest.raises(pb.OverBudget) as e:  # 140 s of training fits, 140 + 20.8 s does not
    clock.check_start("d512", 7 * 10 ** 6, measures=104)
  assert str(e.value).startswith(
      "population d512 needs ~161 s (training ~140 s + measuring 104 member-checkpoints ~21 s),"
      " 150 s of the 450 s budget are left: stopped before it")
  clock.budget_s = 0.0  # no budget: nothing is refused
  clock.check_start("d512", 10 ** 12, measures=10 ** 6)


def test_measure_text_of_older_estimates_is_empty():
  assert pb.measure_text({"s_per_step": 0.1, "steps": 9, "projected_end_s": 1.0}) == ""


def _probing(clock, spent: float, probe: Probe):
  """A probe callable that takes ``spent`` seconds of the fake clock and returns ``probe``."""

  def run() -> Probe:
    clock.now += spent
    return probe

  return run


def _estimate_at(clock, hook, t0: float, t1: float, end: int = 500) -> None:
  """Drive the hook (a run of ``end`` steps) through its warm-up and its 4 timed steps, from
  t0 to t1 seconds."""
  hook.begin(None, start=0, end=end)
  clock.now = t0
  for i in range(pb.WARMUP + 4):
    hook.on_step(i, {})
  clock.now = t1
  hook.on_step(pb.WARMUP + 4, {})


def test_the_first_population_is_projected_from_a_probe_of_its_measurement(capsys):
  clock = _Fake(budget_s=450.0, estimate_at=4)  # nothing measured yet in this call
  probe = Probe("d512-wd0.1-bf16", (0, 1, 2), 0.25, (3.0, 0.5, 0.7), 0)
  hook = pb.Watch(clock, "d512", 1000, measures=26 * 2, members=2,
                  probe=_probing(clock, 5.0, probe))
  _estimate_at(clock, hook, 10.0, 12.0)  # 4 steps in 2 s, then a 5 s probe
  e = clock.estimates["d512"]
  assert e["s_per_step"] == 0.5  # the probe's 5 s are not in the step rate
  assert e["train_end_s"] == 12.0 + 5.0 + 0.5 * 485 and e["probe_s"] == 5.0
  # steady 0.6 s (the mean after the first), set-up 0.25 s x 2 members, 52 − 3 probed = 49
  # member-checkpoints left; the compile (3.0 − 0.6 s, spent in the probe) is recorded but
  # not counted again: the measurement after training reuses it (planted_measure.measure_mesh)
  assert e["measure_from"] == "probe" and e["probe"]["left"] == 49
  assert e["probe"]["steady_s"] == pytest.approx(0.6) and e["probe"]["compile_s"] == 2.4
  assert e["measure_s"] == pytest.approx(2 * 0.25 + 49 * 0.6, abs=0.05)
  assert e["projected_end_s"] == pytest.approx(259.5 + 29.9, abs=0.05)
  assert e["s_per_measure"] is None  # the probe does not set the call's measured rate
  assert ("training ends ~260 s (the probe's 5 s included), then its 49 member-checkpoints "
          "left (of 52: 3 probed, 0 cached) are measured in ~30 s, from a probe of "
          "d512-wd0.1-bf16: checkpoints 0, 1, 2 in 4.45 s (the first 3 s, its compile reused "
          "after training; then 0.6 s each; set-up 0.25 s per member)") in capsys.readouterr().err
  # the same population with 280 s of budget: its training fits (259.5 s), not its measurement
  clock = _Fake(budget_s=280.0, estimate_at=4)
  hook = pb.Watch(clock, "d512", 1000, measures=52, members=2, probe=_probing(clock, 5.0, probe))
  with pytest.raises(pb.OverBudget, match="population d512 would end at ~289 s, past the 280 s"):
    _estimate_at(clock, hook, 10.0, 12.0)
  clock = _Fake(budget_s=280.0, estimate_at=4)  # without the probe it was not projected: fits
  _estimate_at(clock, pb.Watch(clock, "d512", 1000, measures=52, members=2), 10.0, 12.0)
  assert clock.estimates["d512"]["projected_end_s"] == 254.5


def test_one_probed_checkpoint_and_earlier_probes():
  # one checkpoint probed: its time (compile included) for each, no compile term; the 2
  # checkpoints an earlier call's probe cached are not measured again
  need, rec = pb.probe_need(Probe("m", (4,), 0.25, (3.0,), 2), measures=52, members=2)
  assert rec["left"] == 52 - 1 - 2 and rec["steady_s"] is None and rec["compile_s"] is None
  assert need == pytest.approx(2 * 0.25 + 49 * 3.0)
  assert "(its time, compile included, counted for each; set-up" in pb.measure_text(
      {"measures": 52, "measure_s": need, "train_end_s": 100.0, "probe_s": 3.3, "probe": rec})
  assert pb.probe_need(Probe("m", (), 0.0, (), 26), measures=52, members=2) is None


def test_nothing_to_probe_falls_back_to_the_slowest_rate(capsys):
  clock = _Fake(budget_s=450.0, estimate_at=4)
  empty = Probe("d32-wd0.1-bf16", (), 0.0, (), 0)  # no finalized checkpoint to probe
  _estimate_at(clock, pb.Watch(clock, "d32", 1000, 104, 4, _probing(clock, 0.5, empty)),
               10.0, 12.0)
  e = clock.estimates["d32"]
  assert (e["measure_from"], e["measure_s"], e["probe"], e["probe_s"]) == (None, None, None, 0.5)
  assert e["train_end_s"] == 12.5 + 0.5 * 485 == e["projected_end_s"]
  assert ("not projected yet: no population measured so far in this call; no checkpoint to "
          "probe") in capsys.readouterr().err
  clock.measured(104, 20.8)  # 0.2 s per member-checkpoint
  _estimate_at(clock, pb.Watch(clock, "d128", 1000, 104, 4, _probing(clock, 0.5, empty)),
               20.0, 22.0)
  e = clock.estimates["d128"]
  assert e["measure_from"] == "slowest rate" and e["measure_s"] == pytest.approx(20.8)
  assert e["projected_end_s"] == pytest.approx(22.5 + 0.5 * 485 + 20.8, abs=0.05)
  assert "(0.2 s each, the slowest rate seen in this call; no checkpoint to probe)" in \
      capsys.readouterr().err


def test_a_probe_that_met_a_damaged_checkpoint_falls_back(capsys):
  clock = _Fake(budget_s=450.0, estimate_at=4)
  clock.measured(104, 20.8)  # 0.2 s per member-checkpoint
  damaged = Probe("d32-wd0.1-bf16", (), 0.0, (), 0, "step 1 of d32-wd0.1-bf16 (CorruptCheck"
                  "pointError: failed its checksum check)")
  _estimate_at(clock, pb.Watch(clock, "d32", 1000, 104, 4, _probing(clock, 0.5, damaged)),
               10.0, 12.0)
  e = clock.estimates["d32"]
  assert e["measure_from"] == "slowest rate" and e["measure_s"] == pytest.approx(20.8)
  assert e["probe"] is None and e["probe_damaged"] == damaged.damaged and e["probe_s"] == 0.5
  assert ("(0.2 s each, the slowest rate seen in this call; the probe could not read step 1 "
          "of d32-wd0.1-bf16 (CorruptCheckpointError: failed its checksum check))") in \
      capsys.readouterr().err


def test_the_floors_are_spent_before_the_population_and_can_stop_it(capsys):
  clock = _Fake(budget_s=450.0, estimate_at=4)
  clock.now = 30.0  # the floors took 27 s of it
  clock.after_floors("d32", 27.0, "planted_floor.csv")  # 420 s left: goes on
  _estimate_at(clock, pb.Watch(clock, "d32", 1000, 104, 4), 40.0, 42.0)
  e = clock.estimates["d32"]
  assert e["floor_s"] == 27.0 and e["train_end_s"] == 42.0 + 0.5 * 485  # in "now"
  assert ("; the floors of its language took 27 s just before its training (spent: in "
          "'now')") in capsys.readouterr().err
  clock.now = 451.0  # floors that spent the budget: stopped before the population
  with pytest.raises(pb.OverBudget) as stop:
    clock.after_floors("d512", 400.0, "planted_floor-vocab64.csv")
  assert str(stop.value) == (
      "the floors of population d512's language took 400 s and the 450 s budget is spent (now "
      "451 s): stopped before d512; the floors are kept in planted_floor-vocab64.csv: rerun "
      "the same command to resume")
  clock.budget_s = 0.0  # no budget: never stopped
  clock.after_floors("d512", 400.0, "planted_floor.csv")


def test_the_report_gives_the_floors_seconds():
  said = " ".join(_budget_lines({"timings": {"floor_s": 27.4}}, {}))
  assert ("The floors (planted_floor*.csv) took 27.4 s in the latest call, computed before the "
          "training of their language's first population: inside the budget clock's time") in said
  assert "floors" not in " ".join(_budget_lines({"timings": {"floor_s": 0.0}}, {}))
