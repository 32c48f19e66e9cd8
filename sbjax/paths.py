"""User paths: local disk through ``pathlib``, ``gs://`` and any other scheme fsspec knows
through ``etils.epath`` (``upath``; ``pathlib.Path`` would collapse ``gs://b/run`` to the local
folder ``gs:/b/run``). Readers and writers that need real local files use ``local_file`` /
``local_dir`` (a remote object or tree copied once into ``cache_root()``) and ``staged_dir``
(a local folder uploaded when the block ends); ``files_under`` lists a tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import shutil
import tempfile
from typing import Iterator

import fsspec
from etils import epath


def scheme(path) -> str:
  """``gs`` for ``gs://b/x``; ``""`` for a local path."""
  s = os.fspath(path)
  return s.split("://", 1)[0] if "://" in s else ""


def _fs(path):
  """(fsspec file system, path on it); a scheme without its file system installed (``gcsfs``
  for ``gs://``), or unknown, is one ValueError naming it."""
  try:
    return fsspec.core.url_to_fs(os.fspath(path))
  except (ImportError, ValueError) as e:
    raise ValueError(f"{os.fspath(path)}: {e}") from None


def upath(path) -> pathlib.Path | epath.Path:
  """``path`` as a ``pathlib.Path`` on local disk, an ``etils.epath.Path`` for ``scheme://``."""
  if not scheme(path):
    return path if type(path) is type(pathlib.Path()) else pathlib.Path(os.fspath(path))
  _fs(path)
  return epath.Path(path)


def cache_root() -> str:
  """The local cache of files sbjax builds or fetches for remote paths: ``$SBJAX_DATA_CACHE``,
  default ``~/.cache/sbjax/data``."""
  return os.environ.get("SBJAX_DATA_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "sbjax", "data")


def _fetch(fs, files: dict, key, name: str) -> str:
  """``cache_root()/remote/<hash of key>/NAME``: a local copy of the remote ``files`` ({path
  on ``fs``: path relative to NAME, None for NAME itself}), fetched once, whole or not at all."""
  h = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
  dst = os.path.join(cache_root(), "remote", h, name)
  if os.path.exists(dst):
    return dst
  os.makedirs(os.path.dirname(dst), exist_ok=True)
  tmp = tempfile.mkdtemp(dir=os.path.dirname(dst), prefix=f".{name}.")
  try:
    for src, rel in files.items():
      out = os.path.join(tmp, name, *rel.split("/")) if rel else os.path.join(tmp, name)
      os.makedirs(os.path.dirname(out), exist_ok=True)
      fs.get_file(src, out)
    if not os.path.exists(os.path.join(tmp, name)):
      os.mkdir(os.path.join(tmp, name))  # a folder without files
    os.replace(os.path.join(tmp, name), dst)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return dst


def local_file(path) -> str:
  """A local file holding the bytes of ``path``: ``path`` itself on local disk; a remote
  object is fetched once (a changed object is a new copy)."""
  if not scheme(path):
    return os.fspath(path)
  fs, p = _fs(path)
  if not fs.isfile(p):
    raise FileNotFoundError(f"no such file: {os.fspath(path)}")
  return _fetch(fs, {p: None}, [os.fspath(path), sorted(fs.info(p).items())],
                p.rstrip("/").rsplit("/", 1)[-1])


def local_dir(path, names=None) -> str:
  """A local folder holding the files of the folder ``path`` (every file under it, or only
  the top-level ``names`` that exist): ``path`` itself on local disk; a remote tree is
  fetched once (a changed file is a new copy)."""
  if not scheme(path):
    return os.fspath(path)
  fs, p = _fs(path)
  p = p.rstrip("/")
  if names is not None:
    infos = {f"{p}/{n}": fs.info(f"{p}/{n}") for n in names if fs.isfile(f"{p}/{n}")}
  elif fs.isdir(p):
    infos = fs.find(p, detail=True)
  else:
    raise FileNotFoundError(f"no such folder: {os.fspath(path)}")
  rels = {f: f.split("://")[-1][len(p.split("://")[-1]) + 1:] for f in infos}
  key = [os.fspath(path)] + sorted((rels[f], sorted(i.items())) for f, i in infos.items())
  return _fetch(fs, rels, key, p.rsplit("/", 1)[-1])


def _remote_files(d, suffix: str):
  """The files under the remote folder ``d`` (epath refuses ``rglob("**")`` there)."""
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


@contextlib.contextmanager
def staged_dir(path) -> Iterator[str]:
  """A local folder to write ``path``'s files into: ``path`` itself on local disk, else a
  temporary folder uploaded under ``path`` when the block exits normally."""
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
