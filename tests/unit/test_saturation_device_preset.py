"""The saturation device preset's parts that need no training: the preset itself (the tail
language, the device sampler, one population per width), the budget hook's projection and
clean stop (``planted_budget``), and the svd floor bound (``planted_floor``) against the
fitted floors and numpy."""

import dataclasses
import json

import pytest

from experiments.saturation import planted_budget as pb
from experiments.saturation.planted_floor import floors, svd_bounds
from experiments.saturation.planted_presets import arm_config, get_planted_preset
from experiments.saturation.planted_run import groups
from sbjax.data.planted_tail import PlantedTail
from sbjax.studies import floor as floor_lib
from sbjax.train.preempt import EXIT_PREEMPTED


def test_gpu_preset_is_the_issue_recipe():
  p = get_planted_preset("gpu-planted")
  cfgs = [(a, arm_config(p, a)) for a in p.knobs.arms]
  c = cfgs[0][1]
  o = c.data.options
  assert (c.data.source, o.vocab, o.rank, o.mix, o.zipf, o.sampler, o.train_tokens) == \
      ("planted_tail", 4096, 32, 8, 1.5, "device", 0)
  assert (c.model.n_layers, c.train.batch_size, c.train.seq_len, c.train.lr, c.train.steps) == \
      (2, 64, 128, 1e-2, 14_377)
  assert {(a.d, a.weight_decay) for a, _ in cfgs} == {(d, wd) for d in (32, 128, 512)
                                                      for wd in (0.1, 0.03)}
  # one population per width, by increasing cost; λ and seed vary inside it
  gs = groups(p, cfgs)
  assert [n for n, _ in gs] == ["d32-bf16", "d128-bf16", "d512-bf16"]
  for name, g in gs:
    assert {c.model.d_model for _, c in g} == {int(name[1:].split("-")[0])}
    assert {c.model.dtype for _, c in g} == {"bfloat16"}
    assert {a.weight_decay for a, _ in g} == {0.1, 0.03}
  fp32 = get_planted_preset("gpu-planted-fp32")  # the same arms in float32
  assert [(a.d, a.weight_decay, a.seed) for a in fp32.knobs.arms] == \
      [(a.d, a.weight_decay, a.seed) for a in p.knobs.arms]
  assert {a.dtype for a in fp32.knobs.arms} == {"float32"}
  # the cpu presets keep one run per arm
  cpu = get_planted_preset("cpu-planted")
  assert [len(g) for _, g in groups(cpu, [(a, None) for a in cpu.knobs.arms])] == [1] * 6


def test_budget_projects_and_stops_cleanly():
  assert pb.projected_end(now=12.0, t_start=10.0, n=4, steps_left=100) == (0.5, 62.0)
  clock = pb.Clock(budget_s=1e-6, estimate_at=3)
  hook = pb.Watch(clock, "d32", member_tokens_per_step=1000)
  hook.begin(None, start=0, end=500)
  for i in range(pb.WARMUP + 3):
    hook.on_step(i, {})
  with pytest.raises(pb.OverBudget) as e:  # step W + n: projected past a 1 µs budget
    hook.on_step(pb.WARMUP + 3, {})
  assert e.value.code == EXIT_PREEMPTED and "past the 1e-06 s budget" in str(e.value)
  est = clock.estimates["d32"]
  assert est["steps"] == 500 and est["s_per_step"] > 0 and clock.s_per_token > 0
  with pytest.raises(pb.OverBudget, match="population d128 needs"):
    clock.check_start("d128", 10 ** 12)
  pb.Clock(budget_s=0.0, estimate_at=3).check_start("d128", 10 ** 12)  # 0: no budget


@pytest.fixture(scope="module")
def tail():
  return PlantedTail(vocab=12, rank=2, n_mix=2, seed=3)


def test_svd_bound_brackets_the_fitted_floor(tail):
  p, pi = tail.probs, tail.stationary / tail.stationary.sum()
  rows = svd_bounds(tail, [1, 2, 4, 12])
  fitted = {r.rank: r.value for r in floor_lib.floor_curve(tail, [1, 2, 4], gtol=1e-7,
                                                           n_random=1, n_wide=0)}
  for row in rows:
    x, y = floor_lib.svd_start(p, pi, row["rank"])  # its own SVD
    assert row["floor"] == pytest.approx(floor_lib.objective(x @ y.T, p, pi)[0], rel=1e-12)
    assert row["H"] == pytest.approx(tail.entropy, rel=1e-12)
    if row["rank"] in fitted:
      assert row["floor"] >= fitted[row["rank"]] - 1e-9 >= row["H"] - 1e-9
  # full rank: the centred log-probs themselves, so the bound is H
  assert rows[-1]["floor"] == pytest.approx(tail.entropy, abs=1e-9)


def test_floor_modes_cache_apart(tail, tmp_path):
  p = get_planted_preset("gpu-planted-test")
  got = floors(tail, p, [2], tmp_path)
  assert got[2]["start"] == "svd-bound"
  key = json.loads((tmp_path / "planted_floor.key").read_text())
  assert key["mode"] == "svd" and key["ranks"] == [2]
  assert floors(tail, p, [2], tmp_path)[2]["start"] == "svd-bound"  # read back
  bad = dataclasses.replace(p, knobs=dataclasses.replace(p.knobs, floor_mode="exact"))
  with pytest.raises(ValueError, match="floor_mode='exact'; use one of fit, svd"):
    floors(tail, bad, [2], tmp_path / "x")


def _arm(d, wd, verdict):
  return {"d": d, "weight_decay": wd, "gamma_total": 7.9 if wd == 0.1 else 2.37,
          "rise_verdict": verdict}


@pytest.mark.parametrize("rises, want", [
    ({32}, "only at small d (width)"),  # d 32 rises at both Γ, the wider arms never
    ({0.1}, "only at Γ ≈ 7.9 (the optimiser)"),  # every width at λ 0.1, none at 0.03
    (set(), "nowhere")])
def test_the_report_answers_the_question(rises, want):
  from experiments.saturation.planted_measure import account
  from experiments.saturation.planted_report import _answer
  arms = [_arm(d, wd, "yes" if d in rises or wd in rises else "no")
          for d in (32, 128, 512) for wd in (0.1, 0.03)]
  acc = account(arms, small_d=32)
  (text, _) = _answer(arms, acc, {"population": True, "small_d": 32}, partial=False)
  assert f"**{want}**." in text and "d 32, 128, 512; Γ 2.37, 7.9" in text
  (cut, _) = _answer(arms[:2], account(arms[:2], small_d=32), {"population": True,
                                                              "small_d": 32}, partial=True)
  assert "before the budget stop only" in cut
  assert _answer(arms, acc, {"population": False}, partial=False) == []


def test_claims_are_read_at_the_presets_dtype():
  from experiments.saturation.planted_reading import ref_dtype
  assert ref_dtype([{"dtype": "bfloat16"}, {"dtype": "float32"}]) == "float32"  # bf16: a contrast
  assert ref_dtype([{"dtype": "bfloat16"}] * 3) == "bfloat16"  # an all-bf16 preset
  assert ref_dtype([{}]) == "float32"


def test_a_rerun_appends_its_record_to_the_meta_of_earlier_calls(tmp_path):
  """planted_meta.json's ``runs``: a file written before ``runs`` existed counts as one call
  (its own fields), a file with ``runs`` keeps them all; the new call's record comes last."""
  from experiments.saturation.planted_run import CALL_KEYS
  from experiments.shared import with_history

  def _with_history(path, meta):
    return with_history(path, meta, CALL_KEYS)
  path = tmp_path / "planted_meta.json"
  new = {"preset": "p", "stopped": None, "not_run": [], "trained": ["d8"], "seconds": 2.0,
         "knobs": {"steps": 9}}
  assert _with_history(path, new)["runs"] == [{k: new.get(k) for k in CALL_KEYS}]
  old = {"preset": "p", "stopped": "population d8 would end past the budget",
         "not_run": ["d8-wd0.1"], "estimates": {"d8": {"steps": 9}}, "seconds": 1.0,
         "knobs": {"steps": 9}}
  path.write_text(json.dumps(old))
  first = {k: old.get(k) for k in CALL_KEYS}
  assert first["stopped"] == old["stopped"] and first["started"] is None
  meta = _with_history(path, new)
  assert meta["runs"] == [first, {k: new.get(k) for k in CALL_KEYS}]
  assert {k: meta[k] for k in new} == new  # the top level is the latest call's
  path.write_text(json.dumps(meta))
  third = _with_history(path, {**new, "seconds": 3.0})["runs"]
  assert third[:2] == meta["runs"] and third[2]["seconds"] == 3.0
