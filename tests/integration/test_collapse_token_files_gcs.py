"""The collapse experiment's device preset on a bucket (issue 31, item 3): its test-size twin
``gpu-test`` (the seed group of ``--preset=gpu``) reads its token files from ``gs://`` and
writes its whole ``--out`` there, as ``python -m experiments.collapse --preset=gpu
--data=gs://B/train.uint16.bin,gs://B/val.uint16.bin --out=gs://B/out`` does (``run`` and
``report_section``, the two calls of its ``main``, in this process). ``gs://`` is fsspec's
in-memory file system (tests/_fake_gcs.py): etils.epath's real fsspec code path with only the
storage replaced; the experiment keeps no orbax checkpoint (its snapshots are in memory), so
no TensorStore is involved (orbax on a real GCS server: tests/e2e/test_remote_workdir_gcs.py).

The same run on local copies of the files is the reference: every CSV is equal value for value
(the wall-clock columns aside), as are the per-class arrays, the meta record and the report;
a missing token file on the bucket is one line naming it, and nothing lands in a local ``gs:``
folder."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest

from experiments import collapse
from sbjax import paths
from sbjax.data.text import DataError
from tests._fake_gcs import fake_gcs

PRESET = "gpu-test"
B = "gs://bkt"
CSVS = ("collapse_models.csv", "collapse_seeds.csv", "collapse_r2.csv", "collapse_anchors.csv",
        "collapse_tokens.csv")
CLOCK = {"train_seconds", "pass_seconds", "seconds", "cpu_seconds",  # wall/CPU time: differ
         "started", "ended", "estimates", "runs"}  # the call's record: its times


def _chain(n: int, vocab: int, seed: int) -> np.ndarray:
  """A 4-way branching chain over ``vocab`` ids (learnable), as uint16 ids."""
  rng, nxt = np.random.default_rng(seed), np.random.default_rng(0).integers(0, vocab, (vocab, 4))
  x = np.zeros(n, np.uint16)
  for i in range(1, n):
    x[i] = nxt[x[i - 1], rng.integers(0, 4)]
  return x


def _rows(data: bytes) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in CLOCK}
          for r in csv.DictReader(io.StringIO(data.decode()))]


def _outputs(out) -> dict:
  """{name: bytes} of every file the run wrote under ``out`` (local or ``gs://``)."""
  root = paths.upath(out)
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths.files_under(root)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The preset run on local token files into a local folder, then on the same files in the
  bucket into the bucket (its compiled programs reused: same shapes)."""
  tmp = tmp_path_factory.mktemp("collapse_gcs")
  vocab = collapse.get_preset(PRESET).overrides["data.options.vocab_size"]
  files = {"train.uint16.bin": _chain(4096, vocab, 1), "val.uint16.bin": _chain(1024, vocab, 2)}
  for name, x in files.items():
    x.tofile(tmp / name)
  cwd = tmp / "cwd"
  cwd.mkdir()
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(cwd)  # a pathlib bug would write ./gs:/bkt/... here
    mp.setenv("SBJAX_DATA_CACHE", str(tmp / "cache"))  # the local copies of remote token files
    collapse.run(tmp / "local", PRESET, verbose=False,
                 data=f"{tmp / 'train.uint16.bin'},{tmp / 'val.uint16.bin'}")
    res = {"local_md": collapse.report_section(tmp / "local", ".")}
    res["local"] = _outputs(tmp / "local")
    with fake_gcs():
      for name, x in files.items():
        paths.upath(f"{B}/{name}").write_bytes(x.tobytes())
      collapse.run(f"{B}/out", PRESET, verbose=False,
                   data=f"{B}/train.uint16.bin,{B}/val.uint16.bin")
      res["gs_md"] = collapse.report_section(f"{B}/out", ".")
      res["gs"] = _outputs(f"{B}/out")
      with pytest.raises(DataError) as e:
        collapse.run(f"{B}/out2", PRESET, verbose=False,
                     data=f"{B}/nothere.uint16.bin,{B}/val.uint16.bin")
      res["missing"] = str(e.value)
    res["cwd"] = os.listdir(cwd)
  return res


def test_the_bucket_run_writes_what_the_local_run_writes(runs):
  gs, local = runs["gs"], runs["local"]
  assert sorted(gs) == sorted(local)
  assert {"groups/seeds-L1-d8.json", "fig_collapse_vs_loss.png", *CSVS} <= set(gs)
  assert sum(n.startswith("perclass/") for n in gs) == 3  # the seed group's 3 members
  for name in CSVS:
    assert _rows(gs[name]) == _rows(local[name]), name
  models = _rows(gs["collapse_models.csv"])
  assert len(models) == 3 * 2  # 3 seeds x min_count {1, 20}
  assert all(np.isfinite(float(r["val_loss"])) for r in models)  # not NaN equal to NaN
  for name in (n for n in gs if n.endswith(".npz")):
    a, b = np.load(io.BytesIO(gs[name])), np.load(io.BytesIO(local[name]))
    assert sorted(a.files) == sorted(b.files) and a.files
    for k in a.files:
      np.testing.assert_array_equal(a[k], b[k])
  meta = {k: json.loads(runs[k]["collapse_meta.json"]) for k in ("gs", "local")}
  for m in meta.values():
    for k in CLOCK:
      m.pop(k, None)
  assert meta["gs"] == meta["local"] and meta["gs"]["preset"] == PRESET
  assert gs["fig_collapse_vs_loss.png"][:4] == b"\x89PNG"


def test_the_bucket_runs_report_is_the_local_one(runs):
  def strip(md: str) -> str:  # the run call's wall and CPU seconds differ
    return "\n".join(line for line in md.splitlines() if " s wall, " not in line)

  assert runs["gs_md"].startswith("## Linguistic collapse")
  assert strip(runs["gs_md"]) == strip(runs["local_md"])


def test_a_missing_token_file_on_the_bucket_is_one_line_naming_it(runs):
  msg = runs["missing"]
  assert "\n" not in msg
  assert msg.startswith(f"token file not found: {B}/nothere.uint16.bin;"), msg


def test_nothing_lands_in_a_local_gs_folder(runs):
  assert runs["cwd"] == []
