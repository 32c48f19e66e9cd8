"""benchmarks/step_timing.py: the measured step times of the device presets. At CPU test size
it trains the first steps of gpu-planted-test's population (4 members, tokens drawn in the
jitted step) and of vocab_threshold gpu-test's padded head population (4 members on a frozen,
freshly initialised trunk) and projects each run from the clock readings; the plans of the
full-size presets are built without training (members, steps, shapes, pads, frozen trunk)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import step_timing as st  # noqa: E402


def test_projection_arithmetic():
  marks = {"begin": 100.0, 0: 130.0, 2: 131.0, 5: 131.6}
  got = st.projection(marks, warmup=2, n=3, steps=1001)
  assert got["compile_s"] == pytest.approx(30.0)
  assert got["s_per_step"] == pytest.approx(0.2)
  assert got["projected_s"] == pytest.approx(30.0 + 0.2 * 1000)


def test_times_the_test_population(tmp_path):
  res = st.main(["--runs=saturation:gpu-planted-test,vocab_threshold:gpu-test", "--warmup=2",
                 "--steps=1", "--only=d8-bf16,V96-heads-pad4", "--out", str(tmp_path)])
  sat, heads = res["runs"]
  assert (sat["run"], sat["members"], sat["steps"], sat["d"], sat["frozen_trunk"]) == \
      ("d8-bf16", 4, 20, 8, False)
  # the preset's 2 ranks x 2 head lrs as one population: 4 head steps, so 2 + 1 are timed
  assert (heads["run"], heads["members"], heads["steps"], heads["frozen_trunk"]) == \
      ("V96-heads-pad4", 4, 4, True)
  assert (sat["warmup"], sat["timed"], heads["warmup"], heads["timed"]) == (2, 1, 2, 1)
  for rec in res["runs"]:
    assert rec["compile_s"] > 0 and rec["s_per_step"] > 0
    assert rec["projected_s"] == pytest.approx(rec["compile_s"] + (rec["steps"] - 1) *
                                               rec["s_per_step"])
  saved = json.loads((tmp_path / "timing.json").read_text())
  assert saved["runs"] == res["runs"] and saved["backend"] == "cpu"
  assert saved["presets"]["saturation:gpu-planted-test"]["fits_480_s"] is True


def test_full_size_plans(tmp_path):
  # (saturation's full-size populations: tests/unit/test_saturation_device_preset.py; its plan
  # builds the V 4096 language, ~11 s of CPU)
  col = st.plan("collapse:gpu", 2_000_000)
  ((name, cfgs, dss, prepare),) = col
  spe = 2_000_000 // 256 // 32
  assert (name, len(cfgs), len(dss), cfgs[0].train.steps) == ("seeds-L2-d256", 24, 24, 3 * spe)
  assert prepare is None and len(st.plan("collapse:gpu-grid", 2_000_000)) == 12
  vt = st.plan("vocab_threshold:gpu", 0, tmp_path)
  assert [r.name for r in vt] == [f"V{v}-{k}" for v in (1024, 2048, 4096, 8192)
                                  for k in ("trunk", "heads-pad512")]
  for trunk, heads in zip(vt[::2], vt[1::2]):
    (t,) = trunk.cfgs
    assert (t.model.d_model, t.model.n_layers, t.train.steps, t.train.freeze_trunk) == \
        (512, 6, 1200, False) and trunk.prepare is None
    # ONE population: every rank x head lr, padded to 512, 400 steps on the frozen trunk
    assert {(c.model.head.rank, c.train.lr) for c in heads.cfgs} == {
        (r, lr) for r in (16, 32, 48, 64, 96, 128, 192, 256, 384, 512) for lr in (1e-2, 3e-2)}
    assert len(heads.cfgs) == 20 and len(heads.datasets) == 1
    for c in heads.cfgs:
      assert (c.model.head.kind, c.model.head.pad, c.train.steps) == ("padded_lowrank", 512, 400)
      assert c.train.freeze_trunk and c.train.init_step == 0
      assert c.train.init_from == str(tmp_path / trunk.name.split("-")[0] / "trunk")
      assert (c.model.d_model, c.model.n_layers) == (512, 6)
    assert heads.datasets[0] is trunk.datasets[0]
  assert not (tmp_path / "V1024" / "trunk").exists()  # written only before its heads are timed
  assert vt[-1].datasets[0].vocab_size == 8192 and vt[-2].cfgs[0].model.vocab_size == 8192
  with pytest.raises(SystemExit, match="unknown experiment 'nope'"):
    st.plan("nope:gpu", 0)
  with pytest.raises(SystemExit, match="vocab_threshold:cpu trains its heads as separate runs"):
    st.plan("vocab_threshold:cpu", 0, tmp_path)
