"""benchmarks/device_science.sh collapse|saturation --dry-run on CPU (saturation: the last test).
collapse: the gpu preset's test-size twin
(gpu-test: a population of 3 data-order seeds on token files) runs end to end on generated
token files, prints its time estimate, and the one archive holds the report, the CSVs, the
figure, the log and status.json. The runs stay in --work (here a tmp dir, so the checkout stays
clean): --out holds only the archive and status.json. (The other part, collapse-grid, runs its
twin in tests/e2e/test_collapse_gpu_presets.py.)"""

import csv
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from experiments.collapse.report import NO_GRID
from tests._xla import DRY_XLA_FLAGS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_science.sh"


def _env() -> dict:
  """The session's environment for the script, with XLA_FLAGS less the flags that a dry run
  adds itself (DRY_XLA_FLAGS): the script then runs with the suite's flags (tests/_xla.py),
  each once, so its compiles and the in-process tests' share the session's compilation cache
  (JAX keys entries by the sorted list of flags: a repeated flag was another key)."""
  own = set(DRY_XLA_FLAGS.split())
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in own]
  return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}


def _only_the_archive(out: Path, part: str) -> None:
  """--out holds the archive and status.json and nothing else: no checkpoint, runs folder or
  array comes back from the device."""
  assert sorted(p.name for p in out.iterdir()) == [f"device_science_{part}.tar.gz",
                                                     "status.json"]
  with tarfile.open(out / f"device_science_{part}.tar.gz") as tar:
    names = tar.getnames()
    status = json.load(tar.extractfile(f"{part}/status.json"))
  assert json.loads((out / "status.json").read_text()) == status
  assert not [n for n in names if "/runs/" in n or "/checkpoints/" in n or "perclass" in n
              or n.endswith((".npy", ".npz"))], names


def test_dry_run_collapse_writes_one_archive(tmp_path):
  env = _env()
  work = tmp_path / "work"
  proc = subprocess.run(["bash", str(SCRIPT), "collapse", "--dry-run", "--out",
                         str(tmp_path / "ds"), "--work", str(work)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert "estimate: group seeds-L1-d8: 24 steps" in proc.stdout
  assert "dry run: the archive holds the report" in proc.stdout
  archive = tmp_path / "ds" / "device_science_collapse.tar.gz"
  with tarfile.open(archive) as tar:
    names = set(tar.getnames())
    status = json.load(tar.extractfile("collapse/status.json"))
    section = tar.extractfile("collapse/section.md").read().decode()
    rows = list(csv.DictReader(io.TextIOWrapper(tar.extractfile("collapse/collapse_models.csv"))))
    meta = json.load(tar.extractfile("collapse/collapse_meta.json"))
  assert status == {"part": "collapse", "preset": "gpu-test", "dry_run": True, "rc": 0,
                    "status": "finished", "seconds": status["seconds"]}
  assert {"collapse/fig_collapse_vs_loss.png", "collapse/collapse_seeds.csv"} <= names
  assert not any("perclass" in n for n in names)  # per-class arrays stay out of the archive
  assert section.startswith("## Linguistic collapse") and "Among 3 data-order seeds" in section
  # a preset without a grid: one sentence instead of the grid's empty tables and verdicts
  assert NO_GRID in section and "| metric | min_count | n | r |" not in section
  assert "Like for like" not in section and "best seed-group model" in section
  assert meta["preset"] == "gpu-test" and meta["vocab_size"] == 64
  assert {r["kind"] for r in rows} == {"seeds"} and len({r["data_seed"] for r in rows}) == 3
  _only_the_archive(tmp_path / "ds", "collapse")
  # the runs stay in WORK/PART: the group's record (collapse trains in memory) and its tables
  assert (work / "collapse" / "groups" / "seeds-L1-d8.json").is_file()
  assert (work / "collapse" / "perclass").is_dir()


def test_dry_run_saturation_writes_one_archive(tmp_path):
  """`saturation --dry-run`: gpu-planted-test (the tail language at V 32, tokens drawn on the
  device, one width with λ {0.1, 0.03} x seeds {0, 1} as ONE population) end to end; the
  archive's numbers checked against independent recomputations: the svd floor bound by numpy
  from the language, the rare-token row norms from the last checkpoint's head."""
  from experiments.saturation.planted_presets import arm_config, get_planted_preset
  from sbjax import checkpoint as ckpt
  from sbjax import heads
  from sbjax.data import make_dataset
  from sbjax.studies import floor as floor_lib

  env = _env()
  out, work = tmp_path / "ds", tmp_path / "work"
  proc = subprocess.run(["bash", str(SCRIPT), "saturation", "--dry-run", "--out", str(out),
                         "--work", str(work)], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert "estimate: population d8-bf16: 20 steps" in proc.stdout
  assert "dry run: the archive holds the report" in proc.stdout
  with tarfile.open(out / "device_science_saturation.tar.gz") as tar:
    section = tar.extractfile("saturation/section.md").read().decode()
    meta = json.load(tar.extractfile("saturation/planted_meta.json"))
    arms = list(csv.DictReader(io.TextIOWrapper(tar.extractfile("saturation/planted_arms.csv"))))
    ck = list(csv.DictReader(io.TextIOWrapper(
        tar.extractfile("saturation/planted_checkpoints.csv"))))
    fl = list(csv.DictReader(io.TextIOWrapper(tar.extractfile("saturation/planted_floor.csv"))))
  _only_the_archive(out, "saturation")  # the workdirs stay in WORK/PART (below)
  assert meta["preset"] == "gpu-planted-test" and meta["sampler"] == "device"
  assert meta["language"]["kind"] == "planted_tail" and meta["knobs"]["population"]
  assert set(meta["estimates"]) == {"d8-bf16"} and meta["stopped"] is None and meta["not_run"] == []
  assert {(a["weight_decay"], a["seed"]) for a in arms} == {("0.1", "0"), ("0.03", "0"),
                                                             ("0.1", "1"), ("0.03", "1")}
  assert len({a["final_expected_loss"] for a in arms}) == 4  # 4 members, 4 trajectories
  assert "ONE population" in section and "svd bound" in section and "Rarest token" in section
  assert "account:" in section and "### Replicates" in section
  assert "Answer from these arms" in section and "seeds per width" in section
  assert "Compute dtype: bfloat16" in section and "| d8-wd0.03-bf16 |" in section
  # the floor bound: the objective at floor.svd_start's own SVD, by numpy, and ≥ H
  p = get_planted_preset("gpu-planted-test")
  cfg = arm_config(p, p.knobs.arms[0])
  lang = make_dataset(cfg.data, seq_len=16, global_batch_size=4, workdir=None).planted
  pi = lang.stationary / lang.stationary.sum()
  x, y = floor_lib.svd_start(lang.probs, pi, 8)
  want, _ = floor_lib.objective(x @ y.T, lang.probs, pi)
  assert float(fl[0]["floor"]) == pytest.approx(want, rel=1e-9)
  assert float(fl[0]["floor"]) >= float(fl[0]["H"]) == pytest.approx(lang.entropy, rel=1e-12)
  # the rare / frequent row norms of the last checkpoint of member (λ 0.03, seed 1)
  arm = p.knobs.arms[-1]
  _, params, _ = ckpt.load_params(work / "saturation" / "runs" / arm.name)
  w = np.asarray(heads.head_matrix(params, arm_config(p, arm).model), np.float64)
  q = lang.stationary.reshape(-1, lang.vocab).sum(0)
  last = [r for r in ck if r["arm"] == arm.name][-1]
  norms = np.linalg.norm(w, axis=1)
  assert float(last["rare_row_norm"]) == pytest.approx(norms[np.argmin(q)], rel=1e-5)
  assert float(last["frequent_row_norm"]) == pytest.approx(norms[np.argmax(q)], rel=1e-5)
  assert float(last["row_norm_mean"]) == pytest.approx(norms.mean(), rel=1e-5)


def test_dry_run_timing_measures_the_test_presets(tmp_path):
  """`timing --dry-run`: benchmarks/step_timing.py on the test-size twins of the saturation
  and collapse device presets; timing.json in the archive holds one measured run each."""
  env = _env()
  out = tmp_path / "dt"
  proc = subprocess.run(["bash", str(SCRIPT), "timing", "--dry-run", "--out", str(out),
                         "--work", str(tmp_path / "work")], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  with tarfile.open(out / "device_science_timing.tar.gz") as tar:
    timing = json.load(tar.extractfile("timing/timing.json"))
  assert [(r["preset"], r["run"], r["members"]) for r in timing["runs"]] == [
      ("saturation:gpu-planted-test", "d8-bf16", 4), ("collapse:gpu-test", "seeds-L1-d8", 3)]
  for r in timing["runs"]:
    assert r["projected_s"] == pytest.approx(r["compile_s"] + (r["steps"] - 1) * r["s_per_step"])
  assert "projected training" in proc.stdout  # the table, printed by the device command
  _only_the_archive(out, "timing")


def test_a_second_call_of_a_part_stops_before_it_touches_the_first(tmp_path):
  """While a call of a part runs (here: its lock, held by this process as the script holds
  it, flock on WORK/PART.call.lock), a second call of the same part stops at once with exit 2
  and one line saying so, before it empties the first call's logs and status or packs an
  archive; the first call's files are as they were."""
  import fcntl

  work, out = tmp_path / "work", tmp_path / "ds"
  (work / "saturation").mkdir(parents=True)
  first = {"run.log": "the first call's log\n", "result.out": "{}\n",
           "status.json": '{"rc": null}\n', "section.md": "# first\n"}
  for name, text in first.items():
    (work / "saturation" / name).write_text(text)
  with open(work / "saturation.call.lock", "w") as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    proc = subprocess.run(["bash", str(SCRIPT), "saturation", "--dry-run", "--out", str(out),
                           "--work", str(work)], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=60)
  assert proc.returncode == 2, proc.stdout + proc.stderr
  err = proc.stderr.strip().splitlines()
  assert len(err) == 1 and "another call of device_science.sh saturation is running" in err[0]
  assert {n: (work / "saturation" / n).read_text() for n in first} == first
  assert not out.exists() or not any(out.iterdir())  # no archive, no status.json
