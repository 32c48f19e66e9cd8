"""benchmarks/device_check.sh dry-runs on CPU (tiny sizes, no install): it writes one
results.json with every section's exit status and BENCH rows. The device_equal and series
sections are left out here for time (they are run the same way by `SECTIONS=device_equal,
series bash benchmarks/device_check.sh cpu --dry-run`, BUILD_NOTES.md)."""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def test_device_check_dry_run_writes_one_json(tmp_path):
  env = dict(os.environ, OUT=str(tmp_path / "dc"), SECTIONS="train_step,metrics",
             JAX_PLATFORMS="cpu")
  proc = subprocess.run(["bash", str(SCRIPT), "cpu", "--dry-run"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  res = json.loads((tmp_path / "dc" / "results.json").read_text())
  assert res["kind"] == "cpu" and res["dry_run"] and res["n_devices"] == 1
  assert set(res["sections"]) == {"train_step", "metrics"}
  assert all(s["rc"] == 0 for s in res["sections"].values()), res["sections"]
  (train,) = [r for r in res["sections"]["train_step"]["rows"] if r.get("side") == "sbjax"]
  assert train["config"] == "pythia-14m" and train["dtype"] == "bfloat16"
  assert train["tokens_per_s"] > 0 and 0 < train["mfu"] < 1
  spectra = [r for r in res["sections"]["metrics"]["rows"] if r["case"] == "spectra"]
  assert spectra and all(r["median_s"] > 0 for r in spectra)
  assert "all sections ran" in proc.stdout
