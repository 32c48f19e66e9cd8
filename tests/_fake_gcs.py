"""``gs://`` offline: fsspec's in-memory file system registered as ``gs``/``gcs`` (no TensorFlow)."""

from __future__ import annotations

import contextlib

import fsspec
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry


class FakeGCS(MemoryFileSystem):
  protocol = ("gs", "gcs")
  store: dict = {}
  pseudo_dirs = [""]

  def __init__(self, *args, finalize_on_close=None, **kwargs):  # gcsfs's keyword, unused here
    super().__init__(*args, **kwargs)


@contextlib.contextmanager
def fake_gcs():
  saved = {p: _registry.get(p) for p in FakeGCS.protocol}
  for p in FakeGCS.protocol:
    fsspec.register_implementation(p, FakeGCS, clobber=True)
  FakeGCS.store.clear()
  FakeGCS.pseudo_dirs[:] = [""]  # directories made by mkdir: a class attribute too
  try:
    yield FakeGCS.store
  finally:
    FakeGCS.store.clear()
    FakeGCS.pseudo_dirs[:] = [""]
    for p, cls in saved.items():
      if cls is None:
        _registry.pop(p, None)
      else:
        _registry[p] = cls
