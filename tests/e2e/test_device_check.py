"""benchmarks/device_check.sh dry-runs on CPU (tiny sizes, nothing installed): the train
section runs sbjax and HF eager (bf16 autocast) each in its own process, the levers section
sbjax alone at a larger batch, the metrics section its spectra case, and everything lands in ONE archive holding results.json (every section's
exit status, the BENCH rows, the GPU goals as met / not met / not measured), the CSVs and the
logs. The test and series sections are left out here for time (the whole dry run, every
section, is `bash benchmarks/device_check.sh cpu --dry-run`); device_results.py's reading of
tests and series is checked in tests/unit/test_device_check_script.py."""

import json
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def test_device_check_dry_run_writes_one_archive(tmp_path):
  env = dict(os.environ, OUT=str(tmp_path / "dc"), SECTIONS="train,metrics,levers",
             JAX_PLATFORMS="cpu")
  proc = subprocess.run(["bash", str(SCRIPT), "cpu", "--dry-run"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert os.listdir(tmp_path / "dc") == ["device_check_cpu.tar.gz"]
  with tarfile.open(tmp_path / "dc" / "device_check_cpu.tar.gz") as tar:
    names = {Path(n).name for n in tar.getnames()}
    res = json.load(tar.extractfile("./results.json"))
  assert {"results.json", "env.json", "train.log", "train.csv", "metrics.log",
          "metrics.csv"} <= names
  assert res["kind"] == "cpu" and res["dry_run"] and res["n_devices"] == 1
  assert res["env"]["backend"] == "cpu" and res["env"]["jax"]
  assert set(res["sections"]) == {"train", "metrics", "levers"}
  assert all(s["status"] == "ok" and s["rc"] == 0 for s in res["sections"].values())
  rows = {r["side"]: r for r in res["sections"]["train"]["rows"]}
  assert set(rows) == {"sbjax", "hf_eager"}
  for r in rows.values():
    assert r["config"] == "pythia-160m" and r["dtype"] == "bfloat16"
    assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 and r["process_s"] > 0
  assert rows["hf_eager"]["autocast"] == "bfloat16" and rows["hf_eager"]["vs_hf_eager"] == 1.0
  assert rows["sbjax"]["vs_hf_compile"] is None  # no torch.compile side in a dry run
  goals = {g["goal"]: g for g in res["goals"]}
  mfu = goals["pythia-160m sbjax MFU"]
  assert mfu["measured"] == rows["sbjax"]["mfu"] and mfu["status"] == "not met"
  assert goals["pythia-410m sbjax MFU"]["status"] == "not measured"
  assert all(g["dry_run"] for g in goals.values())
  (lever,) = res["sections"]["levers"]["rows"]  # sbjax alone at a larger batch
  assert (lever["side"], lever["batch"], lever["seq"]) == ("sbjax", 4, 32)
  assert lever["tokens_per_s"] > 0 and lever["dtype"] == "bfloat16"
  assert goals["pythia-160m sbjax MFU at 64k tokens per step"]["measured"] == lever["mfu"]
  spectra = [r for r in res["sections"]["metrics"]["rows"] if r["case"] == "spectra"]
  assert spectra and all(r["median_s"] > 0 for r in spectra)
  assert "all sections ran" in proc.stdout
