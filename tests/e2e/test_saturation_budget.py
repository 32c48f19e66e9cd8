"""The budget stop of the saturation device preset (gpu-planted-test: one population of 4
members, tokens drawn in the jitted step): a population whose budget runs out while it trains
stops after its time estimate with exit status 75, keeping its checkpoints and recording the
stop in planted_meta.json; rerunning the same preset resumes it from its newest checkpoint and
ends with the parameters of an uninterrupted run, bit for bit, and the rerun's
planted_meta.json keeps the first call's record of what stopped it and when (``runs``).
A call killed (SIGKILL, as ``timeout`` does) right after its first estimate leaves
planted_meta.json with that call's record and the estimate, and the report says so.

The estimate projects the population's measurement from a probe of it (``planted_budget``):
the first member's first 3 finalized checkpoints, measured at the estimate into its cache.
The uninterrupted call (``whole``) probes; the probed checkpoints are read back from the cache
after training, whose measurement reuses the probe's compile (one lowering of the
measurement's program in the call: it runs under the training's mesh), and the CSVs equal
those of a measurement without the probe's entries, byte for byte. In the bitwise test a
call whose budget is spent stops after its language's floors (computed before the population,
kept for the rerun); then the stopped call's probe meets a really damaged checkpoint (a bit
flipped in an array file of a finalized step): it warns in one line and the estimate falls
back, the training goes on to the same stop, and its resumed end equals ``whole``'s, so
neither the probe nor its failure changes the training.

A checkpoint is measured once (``planted_measure.measure_arm``'s cache, planted_measure.json
in each member's workdir): a second call into a finished folder measures nothing and writes
the same CSVs byte for byte; a cached step whose checkpoint was saved again, a corrupt cache
(with a warning), other validation windows or another measurement version are measured again,
to the same numbers as a measurement without the cache. One uninterrupted call (``whole``)
serves the bitwise resume and these checks.

A damaged member-checkpoint (a bit flipped in, or a cut-off, array file) met by the
measurement after training is set aside to the member's checkpoints_bad/ with one warning
line, and the other checkpoints are measured, to the undamaged run's numbers; the cache,
planted_meta.json, planted_arms.csv and the report say which steps and why, and the rise is
that of the remaining checkpoints; a member with none left is excluded, named, never a crash;
a rerun reads the records back, and one whose population lost a final checkpoint resumes the
training and ends with ``whole``'s parameters and CSVs, bit for bit (copies of ``whole``)."""

import json
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest

from experiments.saturation import planted_budget as pb
from experiments.saturation import planted_measure as pm
from experiments.saturation import planted_run as pr
from experiments.saturation.planted_presets import arm_config, get_planted_preset
from experiments.shared import calls_text, read_rows
from experiments.saturation.planted_report import report_section
from sbjax import checkpoint as ckpt
from sbjax import checksums
from sbjax.data import make_dataset
from sbjax.studies import rise as rise_lib
from sbjax.train.preempt import EXIT_PREEMPTED
from tests._damage import flip_one_byte, largest_data_file

P = get_planted_preset("gpu-planted-test")
CSVS = ("planted_arms.csv", "planted_checkpoints.csv")
LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # jax.monitoring: one per compile


class Whole(NamedTuple):
  out: Path
  meta: dict
  csv: dict  # file name -> bytes
  lowered: int  # lowerings of the measurement's program (jit(measure_checkpoint)) in the call


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
  """One uninterrupted call of the preset into a fresh folder, counting the compiles of the
  measurement's program (a fresh jit: ``_checkpoint_fn``'s cache cleared first)."""
  out = tmp_path_factory.mktemp("whole")
  names = []

  def listen(event, seconds, **kw):
    if event == LOWERING:
      names.append(kw.get("fun_name"))

  pm._checkpoint_fn.cache_clear()
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    meta = pr.run_planted(out, "gpu-planted-test", verbose=False)
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  return Whole(out, meta, {f: (out / f).read_bytes() for f in CSVS},
               names.count("jit(measure_checkpoint)"))


class _Spent(pb.Clock):
  """The real clock with its budget spent from the start (a call with no time left)."""

  def __init__(self, budget_s: float, estimate_at: int):
    super().__init__(budget_s, estimate_at)
    self.budget_s = 1e-6


class _SpentOnceStarted(pb.Clock):
  """The real clock and hook, with the budget spent right after the population starts (what
  a slower device than the estimate does), so that its estimate must stop it."""

  def check_start(self, name: str, member_tokens: int, measures: int = 0) -> None:
    super().check_start(name, member_tokens, measures)
    self.budget_s = 1e-6


def _final_params(out, arm):
  wd = out / "runs" / arm.name
  _, params, _ = ckpt.load_params(wd, ckpt.list_steps(wd)[-1])
  return jax.tree.leaves(jax.device_get(params))


def _damaging(real, flipped: list):
  """``planted_run._prober`` with real damage first: one bit flipped in the largest array file
  of the first member's step 0 (finalized long before the estimate) just before the probe
  reads it; the file goes to ``flipped``."""

  def prober(group, wds, langs):
    probe = real(group, wds, langs)

    def run():
      f = largest_data_file(ckpt.ckpt_dir(wds[0]) / "0")
      flip_one_byte(f)
      flipped.append(f)
      return probe()

    return run

  return prober


def _stopped_by_its_floors(cut, monkeypatch, whole, name: str, wds: list):
  """Call 1 into ``cut`` has no budget left: it stops after its language's floors (computed
  before the population, kept for the rerun), having trained nothing; returns the stop."""
  with monkeypatch.context() as mp, pytest.raises(pb.OverBudget) as stop:
    mp.setattr(pr, "Clock", _Spent)
    pr.run_planted(cut, "gpu-planted-test", verbose=False)
  assert stop.value.code == EXIT_PREEMPTED
  assert re.fullmatch(
      rf"the floors of population {name}'s language took \d+ s and the 1e-06 s budget is "
      rf"spent \(now \d+ s\): stopped before {name}; the floors are kept in planted_floor.csv: "
      "rerun the same command to resume", str(stop.value)), str(stop.value)
  assert (cut / "planted_floor.csv").read_bytes() == (whole.out / "planted_floor.csv").read_bytes()
  assert not any(w.exists() and ckpt.list_steps(w) for w in wds)  # nothing trained
  m1 = json.loads((cut / "planted_meta.json").read_text())
  assert m1["stopped"] == str(stop.value) and m1["estimates"] == {}
  assert m1["trained"] == [] and m1["timings"]["floor_s"] >= 0
  return stop.value


def _stopped_with_a_damaged_probe(cut, monkeypatch, wds: list):
  """Call 2 into ``cut``: its budget is spent once the population started, and its probe
  meets a really damaged checkpoint (``_damaging``): one warning line naming it, and the
  training goes on to the estimate's stop; returns (the stop, the damaged file)."""
  flipped = []
  with monkeypatch.context() as mp, pytest.raises(pb.OverBudget) as stop, \
      warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mp.setattr(pr, "Clock", _SpentOnceStarted)  # the run's clock: spent once it started
    mp.setattr(pr, "_prober", _damaging(pr._prober, flipped))
    pr.run_planted(cut, "gpu-planted-test", verbose=False)
  assert stop.value.code == EXIT_PREEMPTED and "past the 1e-06 s budget" in str(stop.value)
  said = [str(w.message) for w in caught if "budget probe" in str(w.message)]
  assert len(said) == 1 and "\n" not in said[0], said
  assert said[0].startswith(f"the budget probe could not read checkpoint step 0 in {wds[0]} "
                            "(CorruptCheckpointError: failed its checksum check: ")
  assert said[0].endswith("slowest-rate rule instead")
  return stop.value, flipped[0]


def test_budget_stop_then_resume_is_bitwise(tmp_path, monkeypatch, whole):
  cut = tmp_path / "cut"
  cfgs = [(a, arm_config(P, a)) for a in P.knobs.arms]
  ((name, group),) = pr.groups(P, cfgs)
  wds = [cut / "runs" / a.name for a, _ in group]
  floors_stop = _stopped_by_its_floors(cut, monkeypatch, whole, name, wds)
  floors_written = (cut / "planted_floor.csv").stat().st_mtime_ns
  stop, damaged = _stopped_with_a_damaged_probe(cut, monkeypatch, wds)
  assert (cut / "planted_floor.csv").stat().st_mtime_ns == floors_written  # read back
  stopped_at = ckpt.list_steps(wds[0])[-1]
  assert 0 < stopped_at < P.overrides["train.steps"]
  assert all(ckpt.list_steps(w)[-1] == stopped_at for w in wds)
  assert ckpt.list_steps(wds[0])[0] == 0  # the probe leaves the damaged step in place
  first = json.loads((cut / "planted_meta.json").read_text())
  assert first["stopped"] == str(stop) and first["not_run"] == [a.name for a, _ in group]
  assert [r["stopped"] for r in first["runs"]] == [str(floors_stop), str(stop)]
  # the estimate counts the population's measurement, unknown before any population is
  # measured: the damaged probe gave nothing, so nothing is projected
  measures = len(ckpt.checkpoint_steps(group[0][1].train)) * len(group)
  est = first["estimates"][name]
  assert est["measures"] == measures and est["measure_s"] is None
  assert est["measure_from"] is None and est["probe"] is None and est["probe_s"] > 0
  assert est["probe_damaged"].startswith(
      f"step 0 of {group[0][0].name} (CorruptCheckpointError: failed its checksum check")
  assert est["projected_end_s"] == est["train_end_s"] and first["s_per_measure"] is None
  md = report_section(cut)  # no population finished: the section names the stop and estimate
  assert f"**Stopped by the time budget (300 s)**: {stop}" in md
  assert f"Time estimate of population {name}: {est['s_per_step']:.4g} s/step" in md
  assert f"; the probe could not read step 0 of {group[0][0].name} (" in md
  assert "No population has finished in this folder yet" in md
  # repaired (the bit flipped back) for the rerun, whose measurement after training would set
  # the damaged step aside (test_a_damaged_checkpoint_stops_the_probe_and_is_set_aside_...)
  flip_one_byte(damaged)
  assert ckpt.verify_step(wds[0], 0)
  meta = pr.run_planted(cut, "gpu-planted-test", verbose=False)  # the rerun resumes
  assert meta["stopped"] is None and meta["not_run"] == [] and meta["trained"] == [name]
  # the rerun's record is appended to the first calls', which are kept whole (stops,
  # estimate, times); the top level describes the latest call
  assert meta["runs"][:2] == first["runs"] and len(meta["runs"]) == 3
  assert first["runs"][1]["trained"] == [] and name in first["runs"][1]["estimates"]
  assert meta["runs"][2] == {k: meta[k] for k in pr.CALL_KEYS}
  assert first["runs"][1]["ended"] <= meta["runs"][2]["started"]  # ISO UTC: in call order
  assert json.loads((cut / "planted_meta.json").read_text()) == meta
  # the rerun measured the population: its rate, the slowest seconds per member-checkpoint
  t = meta["timings"][name]
  assert t["measured"] == measures and meta["s_per_measure"] == pytest.approx(
      t["measure_s"] / measures, abs=0.01)
  said = calls_text(meta["runs"])[0]
  assert said.startswith("This folder was written by 3 calls of the command: call 1 (")
  assert f"stopped by the budget ({floors_stop})" in said
  assert f"stopped by the budget ({stop})" in said and "ran to its end" in said
  for w in wds:
    assert json.loads((w / "DONE").read_text())["summary"]["step"] == P.overrides["train.steps"]
  assert t["cached"] == 0  # the stopped call's probe measured nothing: nothing to read back
  # the same parameters as `whole`, which probed its measurement during its training
  assert whole.meta["estimates"][name]["measure_from"] == "probe"
  for arm in P.knobs.arms:
    for a, b in zip(_final_params(cut, arm), _final_params(whole.out, arm)):
      np.testing.assert_array_equal(a, b)
  assert [r["final_expected_loss"] for r in read_rows(cut / "planted_arms.csv")] == \
      [r["final_expected_loss"] for r in read_rows(whole.out / "planted_arms.csv")]


# a call of the preset whose clock holds still right after its first estimate (and after the
# meta writer it calls), so that the test can kill it there as `timeout -s KILL` would
_FROZEN = """
import sys, time
from experiments.saturation import planted_budget as pb, planted_run as pr
class Frozen(pb.Clock):
  def estimate(self, *args, **kwargs):
    super().estimate(*args, **kwargs)
    print("frozen after the estimate", file=sys.stderr, flush=True)
    time.sleep(600)
pr.Clock = Frozen
pr.run_planted(sys.argv[1], "gpu-planted-test", verbose=False)
"""


def test_a_call_killed_after_its_estimate_leaves_its_record(tmp_path):
  out = tmp_path / "killed"
  proc = subprocess.Popen([sys.executable, "-c", _FROZEN, str(out)], stderr=subprocess.PIPE,
                          text=True, cwd=Path(__file__).resolve().parents[2])
  err = []
  try:
    for line in proc.stderr:
      err.append(line)
      if line.startswith("frozen after the estimate"):
        proc.send_signal(signal.SIGKILL)
        break
  finally:
    proc.kill()
    proc.wait()
  assert proc.returncode == -signal.SIGKILL, "".join(err[-20:])
  est_line = next(x for x in err if x.startswith("estimate: population d8-bf16: 20 steps"))
  member = P.knobs.arms[0].name
  assert "member-checkpoints left (of 32: 3 probed, 0 cached)" in est_line
  assert f"from a probe of {member}: checkpoints 0, 1, 2 in" in est_line
  meta = json.loads((out / "planted_meta.json").read_text())
  assert [r["started"] for r in meta["runs"]] == [meta["started"]]  # this call, one record
  assert meta["runs"][0] == {k: meta[k] for k in pr.CALL_KEYS}
  assert meta["stopped"] is None and meta["trained"] == [] and meta["account"] is None
  assert meta["not_run"] == [a.name for a in P.knobs.arms]
  est = meta["estimates"]["d8-bf16"]
  assert est["steps"] == 20 and est["s_per_step"] > 0 and est["measure_from"] == "probe"
  assert est["measure_s"] > 0 and est["projected_end_s"] > est["train_end_s"]
  # the probe's work is kept: its 3 checkpoints are in the member's cache
  cache = json.loads((out / "runs" / member / pm.CACHE_FILE).read_text())
  assert sorted(cache["steps"], key=int) == ["0", "1", "2"]
  assert meta["language"]["vocab"] == 32 and meta["rarest_token"]["n_tokens"] > 0
  assert not (out / "planted_arms.csv").exists()
  md = report_section(out)  # no population finished: the section still reports the call
  assert "No population has finished in this folder yet" in md
  assert "**The latest call did not reach its end**" in md
  assert (f"Time estimate of population d8-bf16: {est['s_per_step']:.4g} s/step over its 20 "
          "steps") in md and f"from a probe of {member}: checkpoints 0, 1, 2" in md


def test_the_probe_projects_the_measurement_and_is_read_back(whole, tmp_path):
  out, meta, csv, lowered = whole
  cfgs = [(a, arm_config(P, a)) for a in P.knobs.arms]
  ((name, group),) = pr.groups(P, cfgs)
  tc = group[0][1].train
  measures = len(ckpt.checkpoint_steps(tc)) * len(group)
  est = meta["estimates"][name]
  probe = est["probe"]
  # at the estimate (after step W + n = 14, async saves) steps 0, 1, 2, 4, 8 were sealed and
  # 10 was still in flight: the first 3 sealed ones were probed, on the first member
  assert est["measure_from"] == "probe" and probe["member"] == group[0][0].name
  assert probe["steps"] == [0, 1, 2] and probe["cached"] == 0 and probe["left"] == measures - 3
  assert est["probe_s"] >= probe["seconds"] > 0 and probe["first_s"] > probe["steady_s"] > 0
  assert est["measure_s"] == pytest.approx(  # set-up per member + the rest, steady; the
      # compile, spent in the probe, is not counted again (below: reused after training)
      len(group) * probe["setup_s"] + probe["left"] * probe["steady_s"], abs=0.06)
  assert probe["compile_s"] == pytest.approx(probe["first_s"] - probe["steady_s"], abs=2e-3)
  assert est["projected_end_s"] == pytest.approx(est["train_end_s"] + est["measure_s"], abs=0.1)
  # after training the probed checkpoints were read from the cache, the others measured
  t = meta["timings"][name]
  assert (t["measured"], t["cached"]) == (measures - 3, 3)
  # ... under the training's mesh: the measurement's program was compiled once in the call, by
  # the probe; the member-checkpoints measured after training reused it (2 before session 19)
  assert lowered == 1
  md = report_section(out)
  assert f"from a probe of {probe['member']}: checkpoints 0, 1, 2 in" in md
  assert f"this call's probe during training; the same numbers): {name} " in md
  # without the probe's entries (the first member's cache removed) the same checkpoints are
  # measured after training, into byte-identical CSVs
  copy = shutil.copytree(out, tmp_path / "copy")
  (copy / "runs" / probe["member"] / pm.CACHE_FILE).unlink()
  again = pr.run_planted(copy, "gpu-planted-test", verbose=False)
  k = len(ckpt.checkpoint_steps(tc))
  assert (again["timings"][name]["measured"], again["timings"][name]["cached"]) == \
      (k, measures - k)
  for f in CSVS:
    assert (copy / f).read_bytes() == csv[f], f


def _member(whole, tmp_path):
  """A copy of the first member's workdir (its cache included), its language and windows."""
  out = whole.out
  arm = P.knobs.arms[0]
  wd = shutil.copytree(out / "runs" / arm.name, tmp_path / arm.name)
  cfg = arm_config(P, arm)
  ds = make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                    seed=cfg.train.data_seed, workdir=None)
  return wd, ds.planted, pr.validation_windows(ds, P.knobs.val_windows)


def _same(a, b) -> None:
  """The same rows and L[K, W], bit for bit (NaN equal to NaN)."""
  assert json.dumps(a[0]) == json.dumps(b[0])
  assert a[1].dtype == b[1].dtype == np.float64
  np.testing.assert_array_equal(a[1], b[1])


def test_a_second_call_measures_nothing_and_writes_the_same_csvs(whole):
  out, first, csv, _ = whole
  cfgs = [(a, arm_config(P, a)) for a in P.knobs.arms]
  ((name, group),) = pr.groups(P, cfgs)
  measures = len(ckpt.checkpoint_steps(group[0][1].train)) * len(group)
  # the first call measured all but the 3 its probe measured during training
  assert (first["timings"][name]["measured"], first["timings"][name]["cached"]) == \
      (measures - 3, 3)
  meta = pr.run_planted(out, "gpu-planted-test", verbose=False)
  t = meta["timings"][name]
  assert (t["measured"], t["cached"]) == (0, measures) and meta["trained"] == []
  assert meta["s_per_measure"] is None  # nothing measured: the clock learnt no rate
  for f in CSVS:
    assert (out / f).read_bytes() == csv[f], f
  assert ("read from the cache (planted_measure.json: measured by an earlier call, or by this "
          f"call's probe during training; the same numbers): {name} 0 / {measures}.") in \
      report_section(out)


def test_the_cache_gives_what_a_measurement_without_it_gives(whole, tmp_path):
  wd, lang, win = _member(whole, tmp_path)
  cached = pm.measure_arm(wd, win, lang)
  fresh = pm.measure_arm(wd, win, lang, cache=False)
  k = len(ckpt.list_steps(wd))
  assert (cached[2], fresh[2]) == (0, k)
  _same(cached, fresh)


def test_the_probe_measures_only_finalized_steps_not_cached(whole, tmp_path):
  wd, lang, win = _member(whole, tmp_path)
  steps = ckpt.list_steps(wd)
  assert pm.probe_arm(wd, win, lang) == pm.Probe(wd.name, (), 0.0, (), len(steps))  # all cached
  path = wd / pm.CACHE_FILE
  c = json.loads(path.read_text())
  want = {s: c["steps"][str(s)] for s in steps}
  for s in (1, 4, 8, 10):
    del c["steps"][str(s)]
  path.write_text(json.dumps(c))
  (ckpt.ckpt_dir(wd) / "4" / checksums.MANIFEST_FILE).unlink()  # committed, not sealed yet
  assert pm.finalized_steps(wd) == [s for s in steps if s != 4]
  got = pm.probe_arm(wd, win, lang)
  assert (got.steps, got.cached, len(got.times)) == ((1, 8, 10), 4, 3)
  c = json.loads(path.read_text())["steps"]
  assert sorted(map(int, c)) == [s for s in steps if s != 4]
  assert all(json.dumps(c[str(s)]) == json.dumps(want[s]) for s in (1, 8, 10))  # same numbers
  assert pm.probe_arm(wd, win, lang, most=1).steps == ()  # 4 unsealed: nothing left to probe
  assert pm.measure_arm(wd, win, lang)[2] == 1  # after training: only step 4 is measured


def _cached_rows(whole, arm) -> tuple[dict, dict]:
  """({step: row}, {step: L[s, ·]}) of ``whole``'s measurement of ``arm`` (its cache)."""
  c = json.loads((whole.out / "runs" / arm.name / pm.CACHE_FILE).read_text())["steps"]
  return ({int(s): e["row"] for s, e in c.items()},
          {int(s): np.asarray(e["losses"], np.float64) for s, e in c.items()})


def _bad_lines(caplog) -> list[str]:
  return [r.getMessage() for r in caplog.records if " is bad (" in r.getMessage()]


def test_a_damaged_checkpoint_stops_the_probe_and_is_set_aside_after_training(whole, tmp_path,
                                                                              caplog):
  # the probe stops at a finalized step that fails its checksum (one bit flipped in an array
  # file): one warning line naming it, no times (the estimate falls back), the steps before it
  # kept in the cache, the step left in place; the measurement after training sets it aside
  # (to checkpoints_bad/, one warning line) and measures the others, as it does a step with a
  # truncated array file
  wd, lang, win = _member(whole, tmp_path)
  (wd / pm.CACHE_FILE).unlink()
  steps = ckpt.list_steps(wd)
  flip_one_byte(largest_data_file(ckpt.ckpt_dir(wd) / "1"))
  with pytest.warns(RuntimeWarning) as caught:
    got = pm.probe_arm(wd, win, lang)
  (said,) = [str(w.message) for w in caught]
  assert said.startswith(f"the budget probe could not read checkpoint step 1 in {wd} "
                         "(CorruptCheckpointError: failed its checksum check: ") and "\n" not in said
  assert (got.steps, got.times, got.cached) == ((), (), 0)
  assert got.damaged.startswith(f"step 1 of {wd.name} (CorruptCheckpointError: ")
  assert sorted(json.loads((wd / pm.CACHE_FILE).read_text())["steps"]) == ["0"]
  assert ckpt.list_steps(wd) == steps and not (wd / "checkpoints_bad").exists()
  f = largest_data_file(ckpt.ckpt_dir(wd) / "4")  # truncated
  f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  with caplog.at_level("WARNING", logger="sbjax"):
    m = pm.measure_arm(wd, win, lang)
  good = [s for s in steps if s not in (1, 4)]
  said = _bad_lines(caplog)
  assert len(said) == 2 and said[0].startswith(
      f"checkpoint step 1 in {wd} is bad (CorruptCheckpointError: failed its checksum check: ")
  assert said[1].startswith(f"checkpoint step 4 in {wd} is bad (CorruptCheckpointError: "
                            "failed its checksum check: ") and "moved it aside" in said[1]
  bad = sorted((wd / "checkpoints_bad").iterdir())
  assert [b.name.split("_")[0] for b in bad] == ["1", "4"] and ckpt.list_steps(wd) == good
  assert [(r["step"], r["moved_to"], r["saved_again"]) for r in m.set_aside] == \
      [(1, str(bad[0]), False), (4, str(bad[1]), False)]
  assert m.set_aside[0]["reason"].startswith("CorruptCheckpointError: failed its checksum check")
  assert m.measured == len(good) - 1  # step 0: the probe's, from the cache
  rows, losses = _cached_rows(whole, P.knobs.arms[0])  # the undamaged run's numbers
  assert json.dumps(m.rows) == json.dumps([rows[s] for s in good])
  np.testing.assert_array_equal(m.losses, np.stack([losses[s] for s in good]))
  caplog.clear()
  with caplog.at_level("WARNING", logger="sbjax"):
    again = pm.measure_arm(wd, win, lang)  # a later call: read back, the records kept
  assert again.measured == 0 and again.set_aside == m.set_aside and not _bad_lines(caplog)
  assert json.loads((wd / pm.CACHE_FILE).read_text())["set_aside"] == m.set_aside
  _same(again, m)


def _damaged_copy(whole, tmp_path, damage: dict) -> Path:
  """A copy of ``whole``'s folder with the steps ``damage`` ({member index: steps}) damaged
  (one bit flipped in their largest array file) and those members' caches removed (a
  measurement reads them again: the damage is met)."""
  out = shutil.copytree(whole.out, tmp_path / "copy")
  for i, steps in damage.items():
    wd = out / "runs" / P.knobs.arms[i].name
    (wd / pm.CACHE_FILE).unlink()
    for s in steps:
      flip_one_byte(largest_data_file(ckpt.ckpt_dir(wd) / str(s)))
  return out


def test_a_call_sets_damaged_checkpoints_aside_and_says_so(whole, tmp_path, caplog):
  # member 1 loses step 10 (after 30% of training: in the rise's window), member 3 every
  # step; the call measures the others and does not fail; member 1's statistics use 7 of 8
  # checkpoints, member 3 is excluded, and the CSV, the meta and the report say so
  all_steps = ckpt.list_steps(whole.out / "runs" / P.knobs.arms[3].name)
  out = _damaged_copy(whole, tmp_path, {1: [10], 3: all_steps})
  m1, m3 = P.knobs.arms[1].name, P.knobs.arms[3].name
  with caplog.at_level("WARNING", logger="sbjax"), pytest.warns(RuntimeWarning) as caught:
    meta = pr.run_planted(out, "gpu-planted-test", verbose=False)
  said = _bad_lines(caplog)
  assert len(said) == 1 + len(all_steps) and f"checkpoint step 10 in {out / 'runs' / m1} " \
      "is bad (CorruptCheckpointError: failed its checksum check" in said[0]
  (excl,) = [str(w.message) for w in caught if "excluded" in str(w.message)]
  assert excl.startswith(f"{m3}: no checkpoint of it reads (steps 0, 1, 2, 4, 8, 10, 16, 20 ")
  assert meta["trained"] == [] and meta["excluded"] == [m3] and meta["not_run"] == []
  assert sorted(meta["set_aside"]) == [m1, m3] and len(meta["set_aside"][m3]) == len(all_steps)
  assert [r["step"] for r in meta["set_aside"][m1]] == [10]
  arms = {a["arm"]: a for a in read_rows(out / "planted_arms.csv")}
  assert sorted(arms) == sorted(a.name for a in P.knobs.arms[:3])
  a1 = arms[m1]
  assert (a1["checkpoints_used"], a1["checkpoints_saved"], a1["last_step"]) == (7, 8, 20)
  assert a1["set_aside"].startswith("step 10 (CorruptCheckpointError: failed its checksum")
  assert all(arms[a.name]["set_aside"] == "none" for a in P.knobs.arms[:3:2])
  # the rise of member 1 is the statistic of the undamaged run's L without step 10
  rows, losses = _cached_rows(whole, P.knobs.arms[1])
  good = [s for s in all_steps if s != 10]
  rt = rise_lib.rise_test(np.array(good), np.stack([losses[s] for s in good]), 20,
                          threshold=P.knobs.threshold, after=P.knobs.after, n_boot=P.knobs.n_boot)
  assert (a1["rise"], a1["rise_ci_lo"], a1["rise_ci_hi"]) == (rt["rise"], rt["ci_lo"], rt["ci_hi"])
  assert meta["account"] == pm.account(list(arms.values()), small_d=P.knobs.small_d)
  ck = read_rows(out / "planted_checkpoints.csv")
  assert [r["step"] for r in ck if r["arm"] == m1] == good and not [r for r in ck if r["arm"] == m3]
  md = report_section(out)
  assert f"{m1}: step 10 set aside (CorruptCheckpointError: failed its checksum check" in md
  assert "its rise and the other statistics use 7 of 8 checkpoints, computed without" in md
  assert f"{m3}: step 0 set aside (" in md and "excluded from the table, the account" in md
  caplog.clear()
  csv = {f: (out / f).read_bytes() for f in CSVS}
  with caplog.at_level("WARNING", logger="sbjax"), pytest.warns(RuntimeWarning) as caught:
    again = pr.run_planted(out, "gpu-planted-test", verbose=False)  # a rerun: nothing retrained
  assert again["trained"] == [] and not _bad_lines(caplog)  # the records read back
  assert [str(w.message) for w in caught if "excluded" in str(w.message)] == [excl]
  assert (again["set_aside"], again["excluded"]) == (meta["set_aside"], meta["excluded"])
  assert all((out / f).read_bytes() == csv[f] for f in CSVS)


def test_a_population_with_no_checkpoint_left_is_reported_not_retrained(whole, tmp_path):
  # every step of every member fails its checksum: each member is excluded and named, the
  # CSVs have no rows, the report says so; a rerun does not start the population over
  out = _damaged_copy(whole, tmp_path, {i: ckpt.list_steps(whole.out / "runs" / a.name)
                                        for i, a in enumerate(P.knobs.arms)})
  names = [a.name for a in P.knobs.arms]
  for _ in range(2):  # the call, then its rerun
    with pytest.warns(RuntimeWarning) as caught:
      meta = pr.run_planted(out, "gpu-planted-test", verbose=False)
    assert len([w for w in caught if "excluded from planted_arms.csv" in str(w.message)]) == 4
    assert meta["trained"] == [] and meta["excluded"] == names and meta["account"] is None
    assert meta["not_run"] == [] and all(len(meta["set_aside"][n]) == 8 for n in names)
    assert read_rows(out / "planted_arms.csv") == []
    assert all(ckpt.list_steps(out / "runs" / n) == [] for n in names)
  md = report_section(out)
  assert "No arm has a checkpoint that reads" in md
  assert all(f"{n}: step 0 set aside (CorruptCheckpointError: failed its checksum" in md
             for n in names)


def test_a_lost_final_checkpoint_is_trained_again_by_the_rerun(whole, tmp_path, caplog):
  # member 1's final step fails its checksum: the call sets it aside (its final-* columns
  # are of step 16); the rerun resumes the population from step 16 and saves step 20 again:
  # the same parameters and CSVs as `whole`, byte for byte
  out = _damaged_copy(whole, tmp_path, {1: [20]})
  m1 = P.knobs.arms[1].name
  first = pr.run_planted(out, "gpu-planted-test", verbose=False)
  assert first["trained"] == [] and [r["step"] for r in first["set_aside"][m1]] == [20]
  a1 = {a["arm"]: a for a in read_rows(out / "planted_arms.csv")}[m1]
  assert (a1["checkpoints_used"], a1["last_step"]) == (7, 16)
  assert "its final-* columns are of step 16, the newest that reads" in report_section(out)
  meta = pr.run_planted(out, "gpu-planted-test", verbose=False)
  assert meta["trained"] == [pr.groups(P, [(a, arm_config(P, a)) for a in P.knobs.arms])[0][0]]
  assert meta["timings"][meta["trained"][0]]["measured"] == len(P.knobs.arms)  # the finals
  assert [(r["step"], r["saved_again"]) for r in meta["set_aside"][m1]] == [(20, True)]
  for arm in P.knobs.arms:
    for a, b in zip(_final_params(out, arm), _final_params(whole.out, arm)):
      np.testing.assert_array_equal(a, b)
  for f in CSVS:
    assert (out / f).read_bytes() == whole.csv[f], f
  assert f"{m1}: step 20 was set aside by an earlier call (" in report_section(out)


def test_a_checkpoint_saved_again_is_measured_again(whole, tmp_path):
  wd, lang, win = _member(whole, tmp_path)
  steps = ckpt.list_steps(wd)
  d = ckpt.ckpt_dir(wd) / str(steps[3])
  checksums.write_manifest(d)  # sealed again, the same files: still cached
  want = pm.measure_arm(wd, win, lang)
  assert want[2] == 0
  meta = json.loads((d / "_CHECKPOINT_METADATA").read_text())  # saved again: a new commit time
  meta["commit_timestamp_nsecs"] += 1
  (d / "_CHECKPOINT_METADATA").write_text(json.dumps(meta))
  checksums.write_manifest(d)
  got = pm.measure_arm(wd, win, lang)
  assert got[2] == 1
  _same(got, want)
  path = wd / pm.CACHE_FILE  # a stored identity that is not the checkpoint's, with its numbers
  c = json.loads(path.read_text())
  e = c["steps"][str(steps[-1])]
  e["checkpoint"], e["row"]["expected_loss"], e["losses"] = "sha256:0", 99.0, [99.0] * len(win)
  path.write_text(json.dumps(c))
  got = pm.measure_arm(wd, win, lang)
  assert got[2] == 1
  _same(got, want)
  (d / checksums.MANIFEST_FILE).unlink()  # no manifest: its files' sizes and times identify it
  assert pm.checkpoint_identity(wd, steps[3]).startswith("stat:")
  assert pm.measure_arm(wd, win, lang)[2] == 1 and pm.measure_arm(wd, win, lang)[2] == 0


def test_a_corrupt_cache_warns_and_is_measured_again(whole, tmp_path):
  wd, lang, win = _member(whole, tmp_path)
  want = pm.measure_arm(wd, win, lang)  # read back: the same as measured (the test above)
  (wd / pm.CACHE_FILE).write_bytes(b'{"key": {"version": 1}, "steps": {"0": [')  # cut off
  with pytest.warns(RuntimeWarning, match=r"planted_measure\.json is unreadable \(JSONDecodeError"):
    got = pm.measure_arm(wd, win, lang)
  assert got[2] == len(want[0])
  _same(got, want)
  assert pm.measure_arm(wd, win, lang)[2] == 0  # rewritten whole


def test_other_windows_or_another_version_are_measured_again(whole, tmp_path, monkeypatch):
  wd, lang, win = _member(whole, tmp_path)
  k = len(ckpt.list_steps(wd))
  want = pm.measure_arm(wd, win, lang)
  other = win.copy()
  other[0, 1] = (other[0, 1] + 1) % lang.vocab
  got = pm.measure_arm(wd, other, lang)
  assert got[2] == k and got[1][:, 0].tolist() != want[1][:, 0].tolist()
  np.testing.assert_allclose(got[1][:, 1:], want[1][:, 1:], rtol=1e-5)  # windows left as were
  back = pm.measure_arm(wd, win, lang)  # the cache now holds the other windows' numbers
  assert back[2] == k
  _same(back, want)
  monkeypatch.setattr(pm, "MEASURE_VERSION", pm.MEASURE_VERSION + 1)
  assert pm.measure_arm(wd, win, lang)[2] == k
  assert pm.measure_arm(wd, win, lang)[2] == 0
