"""An experiment's output folder and a Hugging Face round trip on ``gs://``, offline, on a real
GCS server (fake-gcs-server, tests/_gcs_emulator.py), the experiment runner run as a
process: ``experiments.reproduce --out=gs://bkt/out --only=saturation --preset=test`` (its
run with checkpoints and analysis, CSVs, meta record, figures and the report in the bucket).
The saturation experiment's test preset stands for any experiment: what is checked is that a
whole output folder goes to the bucket, and it does so in ~13 s of CPU where the planted test
preset (this test's experiment before) took ~36 s (floor fits, four training runs;
the planted science is checked by tests/e2e/test_reproduce.py). Then the convert tool's export
and import (``sbjax.cli.convert``: the functions its ``main`` calls, in this process) export
the run to ``gs://bkt/hf``, import that into the workdir ``gs://bkt/imported`` and export it
again: the second export's weights are the first's, byte for byte. They run in this process
because what they show is the round trip through the bucket (orbax and TensorStore on a real
GCS server, gcsfs), not the process boundary, which the reproduce run already crosses; three
interpreters with their JAX start-up cost ~9 s of CPU. Nothing lands in a local ``gs:``
folder (the converts run with the same empty working directory as the reproduce process). A
text corpus and lm-eval results are read from the bucket in process (gcsfs lists a tree
differently from the in-memory fake). (The same files on fsspec's in-memory ``gs://``, each
compared with a local run: tests/integration/test_remote_outputs.py.)
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from gcsfs.core import GCSFileSystem

from sbjax import paths
from sbjax.analysis import evals
from sbjax.cli import convert as convert_cli
from sbjax.cli import hf_cache
from sbjax.data.text import scan_text_dir
from tests._corpus import generated_docs, write_corpus
from tests._gcs_emulator import gcs_emulator, objects

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OUT = "bkt/out"
EXP = "saturation"  # the experiment whose folder goes to the bucket (module doc)


def _read(name: str) -> bytes:
  fs = GCSFileSystem(token="anon", endpoint_url=os.environ["STORAGE_EMULATOR_HOST"])
  return fs.cat(name)


def _run(args, cwd, env):
  return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                        text=True)


def test_a_text_corpus_and_evaluations_are_read_from_the_bucket(tmp_path):
  """First in the file: its own server, before the module's fixture starts one."""
  local = write_corpus(tmp_path / "corpus", generated_docs(5, 3, n_lines=8))
  write_corpus(local / "more", generated_docs(6, 1, n_lines=8), prefix="sub")
  ev = {"step1000/results.json": {"results": {"piqa": {"acc,none": 0.5}}}}
  with gcs_emulator("bkt"):
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
      (paths.upath("gs://bkt/corpus") / f.relative_to(local).as_posix()).write_bytes(
          f.read_bytes())
    for name, doc in ev.items():
      (paths.upath("gs://bkt/ev") / name).write_text(json.dumps(doc))
    remote = scan_text_dir("gs://bkt/corpus")
    joined = evals.read_all("gs://bkt/ev")
  here = scan_text_dir(local)
  assert [n for n, _ in remote.docs] == [n for n, _ in here.docs] == [
      "doc00.txt", "doc01.txt", "doc02.txt", "more/sub00.txt"]
  assert remote.docs == here.docs and remote.identity == here.identity
  assert joined == {1000: {"lmeval_piqa_acc": 0.5}}


def _round_trip(src: str, cwd: Path, env: dict) -> dict:
  """What ``experiments.convert --from_workdir=SRC --to_hf=gs://bkt/hf``, then
  ``--from_hf=gs://bkt/hf --to=gs://bkt/imported --step=7``, then
  ``--from_workdir=gs://bkt/imported --to_hf=gs://bkt/hf2`` run (``convert.main``), in this
  process, in ``cwd``, with the emulator's variables (set by ``gcs_emulator``) and the reproduce
  process's data cache: {"export": the step exported, "import": the steps imported, "again":
  the step exported again}."""
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(cwd)
    mp.setenv("SBJAX_DATA_CACHE", env["SBJAX_DATA_CACHE"])
    out = {"export": convert_cli.export_from_workdir(src, "gs://bkt/hf")}
    hf = hf_cache.resolve("gs://bkt/hf")
    out["import"] = convert_cli.import_to_workdir(hf, "gs://bkt/imported", step=7,
                                                  name=hf_cache.model_name("gs://bkt/hf"))
    out["again"] = convert_cli.export_from_workdir("gs://bkt/imported", "gs://bkt/hf2")
  return out


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
  cwd = tmp_path_factory.mktemp("cwd")
  with gcs_emulator("bkt"):
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "SBJAX_DATA_CACHE": str(tmp_path_factory.mktemp("cache"))}
    res = {"repro": _run(["experiments.reproduce", f"--out=gs://{OUT}", f"--only={EXP}",
                          "--preset=test"], cwd, env)}
    runs = sorted({n.split("/")[4] for n in objects(f"{OUT}/{EXP}/runs")})
    res["runs"] = runs
    if runs:
      try:  # a failure here fails the round-trip test only
        res.update(_round_trip(f"gs://{OUT}/{EXP}/runs/{runs[-1]}", cwd, env))
      except Exception:  # noqa: BLE001
        res["round_trip_error"] = traceback.format_exc()
    res["objects"] = objects("bkt")
    res["read"] = {n: _read(n) for n in res["objects"]
                   if n.endswith((".csv", ".json", ".md", ".safetensors", ".png"))
                   and "/checkpoints/" not in n}
    res["cwd"] = cwd
    yield res


def test_an_experiment_writes_its_folder_to_the_bucket(bucket):
  r = bucket["repro"]
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout)
  assert out["report"] == f"gs://{OUT}/report.md" and out["failed"] == []
  names = set(bucket["objects"])
  for f in ("report.md", "timings.json", f"{EXP}/saturation_runs.csv",
            f"{EXP}/saturation_fit.csv", f"{EXP}/saturation_train_loss.csv",
            f"{EXP}/saturation_meta.json", f"{EXP}/fig_loss_anisotropy.png",
            f"{EXP}/fig_scaling.png"):
    assert f"{OUT}/{f}" in names, f
  read = bucket["read"]
  rows = list(csv.DictReader(io.StringIO(read[f"{OUT}/{EXP}/saturation_runs.csv"].decode())))
  assert sorted(f"d{int(x['width'])}" for x in rows) == sorted(bucket["runs"]) != []
  for run in bucket["runs"]:  # every run trained and analysed in the bucket
    for f in ("config.json", "DONE", "metrics.jsonl", "analysis/metrics.csv"):
      assert f"{OUT}/{EXP}/runs/{run}/{f}" in names, (run, f)
    assert any(n.startswith(f"{OUT}/{EXP}/runs/{run}/checkpoints/") for n in names)
  assert json.loads(read[f"{OUT}/{EXP}/saturation_meta.json"])["preset"] == "test"
  report = read[f"{OUT}/report.md"].decode()
  assert f"| {EXP} | test | ok |" in report and f"## {EXP}" in report
  assert read[f"{OUT}/{EXP}/fig_loss_anisotropy.png"][:4] == b"\x89PNG"


def test_a_run_exports_imports_and_exports_again_through_the_bucket(bucket):
  assert "round_trip_error" not in bucket, bucket.get("round_trip_error", "")[-3000:]
  read, names = bucket["read"], set(bucket["objects"])
  ckpts = f"{OUT}/{EXP}/runs/{bucket['runs'][-1]}/checkpoints/"
  last = max(int(n[len(ckpts):].split("/")[0]) for n in names
             if n.startswith(ckpts) and n[len(ckpts):].split("/")[0].isdigit())
  assert (bucket["export"], bucket["import"], bucket["again"]) == (last, [7], 7)
  assert read["bkt/hf/model.safetensors"] == read["bkt/hf2/model.safetensors"]
  assert json.loads(read["bkt/hf/config.json"]) == json.loads(read["bkt/hf2/config.json"])
  rec = json.loads(read["bkt/imported/import.json"])
  assert rec["source"] == "gs://bkt/hf" and [r["step"] for r in rec["revisions"]] == [7]
  assert "bkt/imported/checkpoints/7/checksums.json" in names


def test_nothing_lands_in_a_local_gs_folder(bucket):
  assert os.listdir(bucket["cwd"]) == []
