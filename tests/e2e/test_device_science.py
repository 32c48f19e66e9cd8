"""benchmarks/device_science.sh collapse --dry-run on CPU: the gpu preset's test-size twin
(gpu-test: a population of 3 data-order seeds on token files) runs end to end on generated
token files, prints its time estimate, and the one archive holds the report, the CSVs, the
figure, the log and status.json. (The other part, collapse-grid, runs its twin in
tests/e2e/test_collapse_gpu_presets.py.)"""

import csv
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_science.sh"


def test_dry_run_collapse_writes_one_archive(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run(["bash", str(SCRIPT), "collapse", "--dry-run", "--out",
                         str(tmp_path / "ds")], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
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
  assert meta["preset"] == "gpu-test" and meta["vocab_size"] == 64
  assert {r["kind"] for r in rows} == {"seeds"} and len({r["data_seed"] for r in rows}) == 3
