"""User paths as ``etils.epath.Path``: local disk, ``gs://`` and any other scheme that
fsspec knows, through one type.

``upath(p)`` is how sbjax turns a path it was given (a workdir, an output directory, a token
file) into something it reads or writes. A local path is a pathlib path underneath (the same
bytes on disk as before); ``gs://bucket/run`` stays a bucket path (``pathlib.Path`` would
collapse it to the local folder ``gs:/bucket/run``). A scheme whose file system is not
installed (``gcsfs`` for ``gs://``, ``s3fs`` for ``s3://``) is one error naming the package:

    upath("gs://bucket/run")   # without gcsfs: ImportError: ... pip install gcsfs ...
"""

from __future__ import annotations

import functools
import os

import fsspec
from etils import epath
from fsspec.registry import known_implementations


def scheme(path) -> str:
  """``gs`` for ``gs://b/x``; ``""`` for a local path."""
  s = os.fspath(path)
  return s.split("://", 1)[0] if "://" in s else ""


@functools.lru_cache(maxsize=None)
def _package_of(name: str) -> str | None:
  """The missing package of scheme ``name``, or None when its file system imports."""
  try:
    fsspec.get_filesystem_class(name)
  except ImportError:
    cls = known_implementations.get(name, {}).get("class", name)
    return cls.split(".", 1)[0]
  except ValueError:
    return ""  # a scheme fsspec does not know at all
  return None


def check_scheme(path) -> None:
  """A clear one-line error when ``path``'s scheme has no file system installed."""
  name = scheme(path)
  if not name or name == "file":
    return
  missing = _package_of(name)
  if missing is None:
    return
  if missing == "":
    raise ValueError(f"{os.fspath(path)}: no file system is known for {name}:// paths; use a "
                     "local path or a scheme fsspec supports (gs://, s3://, ...)")
  raise ImportError(f"{os.fspath(path)}: {name}:// paths need the package {missing}, which "
                    f"is not installed; pip install {missing}")


def upath(path) -> epath.Path:
  """``path`` (str, pathlib or epath) as an ``etils.epath.Path``, its scheme checked."""
  if isinstance(path, epath.Path) and not scheme(path):
    return path
  check_scheme(path)
  return epath.Path(path)
