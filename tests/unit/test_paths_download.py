"""sbjax.paths._download (the copy of a remote object into the local cache): a whole file or
nothing. A download that fails (a source that cannot be opened, a connection dropped halfway,
an interrupt) leaves neither the destination nor its temporary file behind."""

import io
import os
import pathlib

import pytest

from sbjax import paths

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class _Dropped(io.RawIOBase):
  """A stream that yields ``n`` bytes of PAYLOAD, then raises ``exc`` (a dropped connection)."""

  def __init__(self, n: int, exc: BaseException):
    self.left, self.exc = n, exc

  def readable(self):
    return True

  def readinto(self, b):
    if self.left <= 0:
      raise self.exc
    k = min(len(b), self.left, 1 << 16)
    b[:k] = PAYLOAD[:k]
    self.left -= k
    return k


class _Source:
  """The one thing _download asks of a source path: ``open("rb")``."""

  def __init__(self, stream):
    self.stream = stream

  def open(self, mode):
    assert mode == "rb"
    return io.BufferedReader(self.stream)


@pytest.mark.parametrize("exc", [ConnectionResetError("peer went away"), KeyboardInterrupt()])
def test_a_download_failing_halfway_leaves_nothing(tmp_path, exc):
  dst = tmp_path / "remote" / "k" / "tokens.npy"
  with pytest.raises(type(exc)):
    paths._download(_Source(_Dropped(len(PAYLOAD) // 2, exc)), os.fspath(dst))
  assert os.listdir(dst.parent) == []  # no tokens.npy, no .tokens.npy.XXXX


def test_a_source_that_cannot_be_opened_leaves_nothing(tmp_path):
  dst = tmp_path / "cache" / "a.bin"
  with pytest.raises(FileNotFoundError):
    paths._download(pathlib.Path(tmp_path / "missing.bin"), os.fspath(dst))
  assert os.listdir(dst.parent) == []


def test_a_whole_download_is_the_source_bytes_and_only_them(tmp_path):
  src = tmp_path / "src.bin"
  src.write_bytes(PAYLOAD)
  dst = tmp_path / "cache" / "a.bin"
  paths._download(src, os.fspath(dst))
  assert dst.read_bytes() == PAYLOAD and os.listdir(dst.parent) == ["a.bin"]
  # a failed later download of the same name keeps the whole copy that is there
  with pytest.raises(ConnectionResetError):
    paths._download(_Source(_Dropped(1000, ConnectionResetError())), os.fspath(dst))
  assert dst.read_bytes() == PAYLOAD and os.listdir(dst.parent) == ["a.bin"]
