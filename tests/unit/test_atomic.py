"""sbjax.atomic: the one atomic writer (local rename, one object on gs://, umask modes)."""

import os
import stat

import numpy as np
import pytest
from etils import epath

from sbjax import atomic
from tests._fake_gcs import fake_gcs


def test_local_write_replaces_and_leaves_no_temporary(tmp_path):
  p = tmp_path / "sub" / "x.json"
  atomic.atomic_write_json(p, {"a": np.float64(1.5), "b": (1, 2), "p": tmp_path})
  atomic.atomic_write_json(p, {"a": np.int32(2)})
  assert p.read_text() == '{\n "a": 2\n}\n'
  assert os.listdir(p.parent) == ["x.json"]


def test_new_files_follow_the_umask(tmp_path):
  old = os.umask(0o022)
  try:
    atomic.atomic_write_text(tmp_path / "a.csv", "x\n")
    os.umask(0o077)
    atomic.atomic_write_text(tmp_path / "b.csv", "x\n")
  finally:
    os.umask(old)
  assert stat.S_IMODE((tmp_path / "a.csv").stat().st_mode) == 0o644
  assert stat.S_IMODE((tmp_path / "b.csv").stat().st_mode) == 0o600


def test_a_failed_write_keeps_the_old_file(tmp_path):
  p = tmp_path / "x.txt"
  p.write_text("old")
  with pytest.raises(RuntimeError, match="boom"):
    with atomic.atomic_path(p) as tmp:
      tmp.write_text("half")
      raise RuntimeError("boom")
  assert p.read_text() == "old"
  assert os.listdir(tmp_path) == ["x.txt"]


def test_gs_path_is_written_as_one_object():
  with fake_gcs() as store:
    p = epath.Path("gs://bucket/run/plan.json")
    atomic.atomic_write_json(p, {"r": [4, 8]})
    with atomic.atomic_path("gs://bucket/run/w.npy") as tmp, open(tmp, "wb") as f:
      np.save(f, np.arange(3))
    assert sorted(store) == ["gs://bucket/run/plan.json", "gs://bucket/run/w.npy"]
    assert p.read_text() == '{\n "r": [\n  4,\n  8\n ]\n}\n'
    with epath.Path("gs://bucket/run/w.npy").open("rb") as f:
      np.testing.assert_array_equal(np.load(f), np.arange(3))
  assert not atomic.is_local("gs://bucket/x") and atomic.is_local("runs/x")
