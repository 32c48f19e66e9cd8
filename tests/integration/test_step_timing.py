"""benchmarks/step_timing.py: the measured step times of the device presets. At CPU test size
it trains the first steps of gpu-planted-test's population (4 members, tokens drawn in the
jitted step) and projects the whole run from the clock readings; the plans of the full-size
presets are built without training (members, steps, shapes)."""

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
  res = st.main(["--runs=saturation:gpu-planted-test", "--warmup=2", "--steps=3",
                 "--out", str(tmp_path)])
  (rec,) = res["runs"]
  assert (rec["run"], rec["members"], rec["steps"], rec["d"], rec["repeat"]) == \
      ("d8-bf16", 4, 20, 8, 1)
  assert (rec["warmup"], rec["timed"]) == (2, 3)
  assert rec["compile_s"] > 0 and rec["s_per_step"] > 0
  assert rec["projected_s"] == pytest.approx(rec["compile_s"] + 19 * rec["s_per_step"])
  saved = json.loads((tmp_path / "timing.json").read_text())
  assert saved["runs"] == res["runs"] and saved["backend"] == "cpu"
  assert saved["presets"]["saturation:gpu-planted-test"]["fits_480_s"] is True


def test_full_size_plans(tmp_path):
  # (saturation's full-size populations: tests/unit/test_saturation_device_preset.py; its plan
  # builds the V 4096 language, ~11 s of CPU)
  col = st.plan("collapse:gpu", 2_000_000)
  ((name, cfgs, dss, _),) = col
  spe = 2_000_000 // 256 // 32
  assert (name, len(cfgs), len(dss), cfgs[0].train.steps) == ("seeds-L2-d256", 24, 24, 3 * spe)
  assert len(st.plan("collapse:gpu-grid", 2_000_000)) == 12
  vt = st.plan("vocab_threshold:gpu", 0, tmp_path)
  assert [(n, c[0].model.d_model, c[0].model.n_layers, c[0].train.steps, rep)
          for n, c, _, rep in vt[:2]] == [("V1024-trunk", 512, 6, 1200, 1),
                                          ("V1024-heads-r512", 512, 6, 400, 20)]
  assert [n for n, *_ in vt][2:] == [f"V{v}-{k}" for v in (2048, 4096, 8192)
                                     for k in ("trunk", "heads-r512")]
  assert vt[1][1][0].model.head.rank == 512 and vt[-1][2][0].vocab_size == 8192
  with pytest.raises(SystemExit, match="unknown experiment 'nope'"):
    st.plan("nope:gpu", 0)
