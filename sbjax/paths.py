"""User paths: local disk through ``pathlib``, ``gs://`` and any other scheme fsspec knows
through ``etils.epath``.

``upath(p)`` is how sbjax turns a path it was given (a workdir, an output directory, a token
file) into something it reads or writes. A local path stays a ``pathlib.Path`` (the same
behaviour and bytes on disk as before); ``gs://bucket/run`` becomes an epath bucket path
(``pathlib.Path`` would collapse it to the local folder ``gs:/bucket/run``). A scheme whose file
system is not installed (``gcsfs`` for ``gs://``, ``s3fs`` for ``s3://``) is one error naming
the package:

    upath("gs://bucket/run")   # without gcsfs: ImportError: ... pip install gcsfs ...

Readers and writers that need a real local file or folder use ``local_file`` / ``local_dir``
(a remote object or tree copied once into ``cache_root()``) and ``staged_dir`` (a local
folder whose files are uploaded when the block ends); ``files_under`` lists a tree (epath's
``rglob`` refuses ``**`` on remote paths).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pathlib
import shutil
import tempfile
from typing import Iterator

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


class FileSystemMissing(ImportError, ValueError):
  """A ``scheme://`` path whose fsspec file system is not installed (a ValueError too, so the
  command-line tools report it as one ``error:`` line)."""


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
  raise FileSystemMissing(f"{os.fspath(path)}: {name}:// paths need the package {missing}, "
                          f"which is not installed; pip install {missing}")


def upath(path) -> pathlib.Path | epath.Path:
  """``path`` (str, pathlib or epath) as a path object: a ``pathlib.Path`` on local disk (what
  sbjax returned before, so callers' ``stat().st_size`` and the like are unchanged), an
  ``etils.epath.Path`` for ``scheme://`` paths, their file system checked (module doc)."""
  if not scheme(path):
    return path if type(path) is type(pathlib.Path()) else pathlib.Path(os.fspath(path))
  check_scheme(path)
  return epath.Path(path)


def cache_root() -> str:
  """The local cache of files sbjax builds or fetches for remote paths: ``$SBJAX_DATA_CACHE``,
  default ``~/.cache/sbjax/data``."""
  return os.environ.get("SBJAX_DATA_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "sbjax", "data")


def local_file(path) -> str:
  """A local file holding the bytes of ``path``, for readers that memory-map a file or need
  its name (token files): ``path`` itself on local disk; a remote object is downloaded once to
  ``cache_root()/remote/<hash of its URL, size and mtime>/<name>`` (a changed object is a new
  copy). A missing remote object is ``FileNotFoundError`` naming it."""
  if not scheme(path):
    return os.fspath(path)
  src = upath(path)
  if not src.is_file():
    raise FileNotFoundError(f"no such file: {os.fspath(path)}")
  st = src.stat()
  key = hashlib.sha256(f"{os.fspath(src)}|{st.length}|{st.mtime}".encode()).hexdigest()[:16]
  dst = os.path.join(cache_root(), "remote", key, src.name)
  if not os.path.isfile(dst):
    _download(src, dst)
  return dst


def _remote_files(d, suffix: str):
  """The files under the remote folder ``d`` by ``iterdir`` (epath refuses ``rglob("**")`` on
  remote paths, and its ``walk`` yields paths without their ``gs://`` on gcsfs)."""
  for c in d.iterdir():
    if c.is_dir():
      yield from _remote_files(c, suffix)
    elif c.name.endswith(suffix):
      yield c


def files_under(root, suffix: str = "") -> list:
  """The files under the folder ``root`` (recursively) whose names end with ``suffix``,
  sorted by their path relative to ``root``: ``pathlib``'s ``rglob`` on local disk."""
  root = upath(root)
  if not scheme(root):
    found = (p for p in root.rglob(f"*{suffix}") if p.is_file())
  else:
    found = _remote_files(root, suffix)
  return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _download(src, dst: str) -> None:
  """``src``'s bytes into the local file ``dst`` (a whole file or nothing: a failed or
  interrupted download removes its temporary file and raises)."""
  os.makedirs(os.path.dirname(dst), exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=f".{os.path.basename(dst)}.")
  try:
    with os.fdopen(fd, "wb") as out, src.open("rb") as f:  # the fd is owned before src opens
      shutil.copyfileobj(f, out, 4 << 20)
    os.replace(tmp, dst)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)
    raise


def local_dir(path, names=None) -> str:
  """A local folder holding the files of the folder ``path`` (every file under it, or only
  the top-level ``names`` that exist), for readers that need local files (safetensors are
  memory-mapped, tokenizers load from a file name): ``path`` itself on local disk; a remote
  tree is copied once to ``cache_root()/remote/<hash of its URL and of every file's name, size
  and mtime>/<name>``. A missing remote folder is ``FileNotFoundError`` naming it."""
  if not scheme(path):
    return os.fspath(path)
  src = upath(path)
  if names is not None:
    files = [src / n for n in names if (src / n).is_file()]
  elif src.is_dir():
    files = files_under(src)
  else:
    raise FileNotFoundError(f"no such folder: {os.fspath(path)}")
  rels = [f.relative_to(src).as_posix() for f in files]
  stats = [(r, f.stat()) for r, f in zip(rels, files)]
  key = hashlib.sha256(repr([os.fspath(src)] + [(r, s.length, s.mtime) for r, s in stats])
                       .encode()).hexdigest()[:16]
  dst = os.path.join(cache_root(), "remote", key, src.name)
  done = os.path.join(cache_root(), "remote", key, ".complete")  # beside the copy, not in it
  if not os.path.isfile(done):
    for r, f in zip(rels, files):
      _download(f, os.path.join(dst, *r.split("/")))
    os.makedirs(dst, exist_ok=True)
    open(done, "w").close()
  return dst


@contextlib.contextmanager
def staged_dir(path) -> Iterator[str]:
  """A local folder to write ``path``'s files into: ``path`` itself on local disk; for a
  remote ``path`` a temporary folder whose files are uploaded under ``path`` (one object
  each) when the block exits normally, and dropped otherwise."""
  if not scheme(path):
    yield os.fspath(path)
    return
  dst = upath(path)
  with tempfile.TemporaryDirectory(prefix="sbjax_stage_") as tmp:
    yield tmp
    for f in files_under(tmp):
      target = dst / f.relative_to(tmp).as_posix()
      target.parent.mkdir(parents=True, exist_ok=True)
      with f.open("rb") as src, target.open("wb") as out:  # streamed: one object at close
        shutil.copyfileobj(src, out, 4 << 20)
