"""sbjax.atomic: the one atomic writer on local disk (rename, umask modes);
gs:// in tests/integration/test_remote_paths.py."""

import os
import stat

import numpy as np
import pytest

from sbjax import atomic


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

