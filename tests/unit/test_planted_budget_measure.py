"""The saturation device preset's budget clock with its measurement (``planted_budget``): a
population's projected end is its training's end plus its member-checkpoints times the
slowest measurement rate seen in the call, which is unknown (and said so) before the first
population is measured; ``check_start`` refuses a population whose training fits what is
left but whose training and measurement do not. Pure arithmetic on a fake clock."""

import pytest

from experiments.saturation import planted_budget as pb


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
  hook.begin(None, start=0, end=500)
  clock.now = 10.0
  for i in range(pb.WARMUP + 4):
    hook.on_step(i, {})
  clock.now = 12.0
  hook.on_step(pb.WARMUP + 4, {})  # 4 steps in 2 s; 500 − 15 steps left
  e = clock.estimates["d32"]
  assert (e["s_per_step"], e["train_end_s"]) == (0.5, 12.0 + 0.5 * 485)
  assert e["measure_s"] is None and e["s_per_measure"] is None and e["measures"] == 104
  assert e["projected_end_s"] == e["train_end_s"]  # nothing measured yet: training only
  err = capsys.readouterr().err
  assert "estimate: population d32: 500 steps, 0.5 s/step, ends at ~254 s" in err
  assert "measurement of its 104 member-checkpoints not projected yet" in err
  assert written == [clock.estimates]  # the meta writer saw the estimate before any stop
  clock.measured(104, 20.8)  # d32 measured: 0.2 s per member-checkpoint
  clock.measured(26, 2.6)  # a faster one: the slowest rate stays
  assert clock.s_per_measure == pytest.approx(0.2)
  hook = pb.Watch(clock, "d128", member_tokens_per_step=1000, measures=26 * 4)
  hook.begin(None, start=0, end=400)
  clock.now = 250.0
  for i in range(pb.WARMUP + 4):
    hook.on_step(i, {})
  clock.now = 252.0
  with pytest.raises(pb.OverBudget, match=r"would end at ~465 s, past the 450 s budget"):
    hook.on_step(pb.WARMUP + 4, {})  # training ends at 252 + 0.5 · 385 = 444.5 s: it fits
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
