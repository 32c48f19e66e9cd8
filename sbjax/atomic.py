"""Atomic file writes: the one helper every sbjax writer goes through.

A reader sees either the old file or the new one: on a local disk the bytes go to a temporary
file in the same directory, which then replaces the target (``os.replace``; new files follow
the umask); on any other ``etils.epath`` backend (``gs://``) the content is written as one
object. A target that is a symbolic link is replaced, never written through. A failed write is
an ``OSError`` naming the target.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
from etils import epath


def is_local(path) -> bool:
  """True for a path on the local file system (no ``scheme://`` prefix)."""
  return "://" not in os.fspath(path)


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
  """A local temporary path to write; when the block exits normally it becomes ``path``
  (module doc), else it is removed and ``path`` is untouched. Missing parents are created."""
  target = epath.Path(path)
  target.parent.mkdir(parents=True, exist_ok=True)
  local = is_local(path)
  fd, tmp = tempfile.mkstemp(dir=os.fspath(target.parent) if local else None,
                             prefix=f".{target.name}.", suffix=".tmp")
  os.close(fd)
  try:
    yield Path(tmp)
    if local:
      mask = os.umask(0)
      os.umask(mask)
      os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes it private (0600)
      os.replace(tmp, os.fspath(target))  # a link at target is replaced, not followed
    else:
      target.write_bytes(Path(tmp).read_bytes())
  except OSError as e:  # name the file being written, not the temporary one (or none)
    if e.filename in (None, tmp) and e.errno is not None:
      raise OSError(e.errno, e.strerror, os.fspath(path)) from e
    raise
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)


def atomic_write_bytes(path, data: bytes) -> None:
  with atomic_path(path) as tmp:
    tmp.write_bytes(data)


def atomic_write_text(path, text: str) -> None:
  atomic_write_bytes(path, text.encode())


def json_default(x):
  """``json.dumps``' fallback for numpy scalars and arrays, sets, tuples and paths."""
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  if isinstance(x, (set, frozenset, tuple)):
    return list(x)
  if isinstance(x, (Path, epath.Path)):
    return os.fspath(x)
  raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def atomic_write_json(path, obj, indent: int | None = 1) -> None:
  atomic_write_text(path, json.dumps(obj, indent=indent, default=json_default) + "\n")
