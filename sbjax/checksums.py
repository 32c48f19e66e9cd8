"""Checksum manifests of checkpoint directories: every file's size and SHA-256.

``write_manifest(d)`` hashes every file under the directory ``d`` (a finished checkpoint step)
and writes ``d/checksums.json`` atomically (``sbjax.atomic``)::

    {"format": 1, "algorithm": "sha256",
     "files": {"params/ocdbt.process_0/d/1f2e...": [size_bytes, "hex digest"], ...}}

``verify_manifest(d, items)`` re-hashes the files the manifest lists (those under the
top-level folders ``items`` and the top-level files, or all of them for ``items=None``) and
raises ``ChecksumError`` naming the first file that is missing, has another size (truncated)
or another digest (bit rot, an edit). A directory without a manifest (written before
manifests existed, or killed between its commit and its manifest) is not judged: ``False``.

Why SHA-256: it is in the standard library (``hashlib``, OpenSSL, SHA-NI on x86 and ARMv8
crypto extensions), it catches every change, not only burst errors, and it is the digest the
series integrity checks already record (``sbjax.convert.integrity``), so one algorithm serves
both; CRC32C would need another package and is faster only where the hash, not the disk, is
the bottleneck. Its cost against the save itself: ``benchmarks/ckpt_checksum.py`` and
BUILD_NOTES.md. Files are hashed in parallel threads (``hashlib`` releases the GIL).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sbjax.atomic import atomic_write_json, is_local
from sbjax.paths import upath

MANIFEST_FILE = "checksums.json"
ALGORITHM = "sha256"
_CHUNK = 4 << 20
_THREADS = 4


class ChecksumError(ValueError):
  """A file of a checkpoint directory that is not what its manifest says."""


def file_digest(path) -> str:
  """Hex SHA-256 of the file at ``path``, read in 4 MiB chunks."""
  h = hashlib.sha256()
  buf = bytearray(_CHUNK)
  view = memoryview(buf)
  if not is_local(path):
    with upath(path).open("rb") as f:
      while chunk := f.read(_CHUNK):
        h.update(chunk)
    return h.hexdigest()
  with open(path, "rb", buffering=0) as f:
    while n := f.readinto(buf):
      h.update(view[:n])
  return h.hexdigest()


def _digests(d: Path, rels: list[str]) -> list[str]:
  with ThreadPoolExecutor(_THREADS) as pool:
    return list(pool.map(lambda r: file_digest(d / r), rels))


def _size(p) -> int:
  return p.stat().st_size if is_local(p) else p.stat().length  # epath's StatResult: length


def relative_files(d) -> list[str]:
  """Every file under ``d``, relative, posix (``rglob`` locally; a walk on remote storage,
  where epath refuses a recursive glob)."""
  if is_local(d):
    root = Path(d)  # pathlib: epath refuses a recursive glob even on local disk
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
  def bare(p) -> str:  # fsspec walks may drop the scheme: compare without it
    return os.fspath(p).split("://", 1)[-1].rstrip("/")
  root = bare(d) + "/"
  return [f"{bare(top)}/{f}"[len(root):] for top, _, files in d.walk() for f in files]


def write_manifest(d) -> dict:
  """Hash every file under ``d`` and write ``d/checksums.json``; returns the manifest."""
  d = upath(d)
  rels = sorted(r for r in relative_files(d) if r != MANIFEST_FILE)
  sizes = [_size(d / r) for r in rels]
  files = {r: [s, h] for r, s, h in zip(rels, sizes, _digests(d, rels))}
  manifest = {"format": 1, "algorithm": ALGORITHM, "files": files}
  atomic_write_json(d / MANIFEST_FILE, manifest)
  return manifest


def read_manifest(d) -> dict | None:
  """The manifest of ``d``, or None when it has none; an unreadable one is a ChecksumError."""
  path = upath(d) / MANIFEST_FILE
  if not path.is_file():
    return None
  try:
    m = json.loads(path.read_text())
    files = m["files"]
    ok = m.get("algorithm") == ALGORITHM and all(
        isinstance(v, list) and len(v) == 2 for v in files.values())
  except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
    raise ChecksumError(f"{path} is unreadable ({type(e).__name__}: {e})") from None
  if not ok:
    raise ChecksumError(f"{path} is not an sbjax {ALGORITHM} manifest")
  return m


def _selected(rels, items) -> list[str]:
  if items is None:
    return sorted(rels)
  return sorted(r for r in rels if "/" not in r or r.split("/", 1)[0] in items)


def verify_manifest(d, items=None) -> bool:
  """Check the files of ``d`` against its manifest (see the module docstring). True when
  verified, False when ``d`` has no manifest; raises ``ChecksumError`` naming the file."""
  d = upath(d)
  m = read_manifest(d)
  if m is None:
    return False
  rels = _selected(m["files"], items)
  for r in rels:
    size = m["files"][r][0]
    p = d / r
    if not p.is_file():
      raise ChecksumError(f"{r} is missing (listed in {MANIFEST_FILE})")
    got = _size(p)
    if got != size:
      raise ChecksumError(f"{r} has {got} bytes, {MANIFEST_FILE} says {size} (truncated or "
                          "extended)")
  for r, h in zip(rels, _digests(d, rels)):
    if h != m["files"][r][1]:
      raise ChecksumError(f"checksum mismatch in {r}: {ALGORITHM} {h[:12]}..., "
                          f"{MANIFEST_FILE} says {m['files'][r][1][:12]}... (the file changed "
                          "after it was written: bit rot or an edit)")
  return True
