"""A local copy of a remote file is whole or absent: a fetch failing halfway leaves nothing."""

import os

import pytest

from sbjax import paths


class _Source:
  """A file system whose ``get_file`` writes half a file, then fails (while ``fail``)."""

  def __init__(self, fail):
    self.fail = fail

  def get_file(self, src, dst):
    with open(dst, "wb") as f:
      f.write(b"half")
      if self.fail:
        raise self.fail
      f.write(b" and the rest")


@pytest.mark.parametrize("exc", [ConnectionResetError("peer went away"), KeyboardInterrupt()])
def test_a_fetch_failing_halfway_leaves_nothing(tmp_path, monkeypatch, exc):
  monkeypatch.setenv("SBJAX_DATA_CACHE", str(tmp_path))
  files = {"bkt/tree/a.bin": "a.bin", "bkt/tree/b.bin": "sub/b.bin"}
  with pytest.raises(type(exc)):
    paths._fetch(_Source(exc), files, "key", "tree")
  left = [(r, ds, fs) for r, ds, fs in os.walk(tmp_path)]
  assert not any(fs for _, _, fs in left) and len(left) == 3  # remote/<key>/, no temporary
  got = paths._fetch(_Source(None), files, "key", "tree")
  assert {os.path.relpath(os.path.join(r, f), got) for r, _, fs in os.walk(got) for f in fs} \
      == {"a.bin", os.path.join("sub", "b.bin")}
  assert open(os.path.join(got, "a.bin"), "rb").read() == b"half and the rest"
