"""Checksum manifests of checkpoint directories: every file's size and SHA-256.

``write_manifest(d)`` hashes every file under ``d`` (a finished checkpoint step) and writes
``d/checksums.json`` atomically::

    {"format": 1, "algorithm": "sha256", "files": {"params/ocdbt.process_0/d/1f": [size, "hex"]}}

``verify_manifest(d, items)`` re-hashes the files it lists (those under the top-level folders
``items`` and the top-level files; all for ``items=None``) and raises ``ChecksumError`` naming
the first that is missing or differs; a directory without a manifest is not judged (False).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

from sbjax.atomic import atomic_write_json
from sbjax.paths import files_under, upath

MANIFEST_FILE = "checksums.json"
ALGORITHM = "sha256"


class ChecksumError(ValueError):
  """A file of a checkpoint directory that is not what its manifest says."""


def _entries(d, rels: list[str]) -> list[list]:
  """[size, digest] of each file ``d/rel``; FileNotFoundError when one is missing."""
  def entry(rel):
    with (d / rel).open("rb") as f:
      h = hashlib.file_digest(f, ALGORITHM)
      return [f.tell(), h.hexdigest()]
  with ThreadPoolExecutor(4) as pool:
    return list(pool.map(entry, rels))


def relative_files(d) -> list[str]:
  """Every file under ``d``, relative, posix."""
  d = upath(d)
  return [p.relative_to(d).as_posix() for p in files_under(d)]


def write_manifest(d) -> dict:
  """Hash every file under ``d`` and write ``d/checksums.json``; returns the manifest."""
  d = upath(d)
  rels = [r for r in relative_files(d) if r != MANIFEST_FILE]
  manifest = {"format": 1, "algorithm": ALGORITHM, "files": dict(zip(rels, _entries(d, rels)))}
  atomic_write_json(d / MANIFEST_FILE, manifest)
  return manifest


def read_manifest(d) -> dict | None:
  """The manifest of ``d``, or None when it has none; an unreadable one is a ChecksumError."""
  path = upath(d) / MANIFEST_FILE
  if not path.is_file():
    return None
  try:
    return {"files": dict(json.loads(path.read_text())["files"])}
  except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
    raise ChecksumError(f"{path} is unreadable ({type(e).__name__}: {e})") from None


def verify_manifest(d, items=None) -> bool:
  """Check the files of ``d`` against its manifest (module doc). True when verified, False
  when ``d`` has no manifest; raises ``ChecksumError`` naming the file."""
  d = upath(d)
  m = read_manifest(d)
  if m is None:
    return False
  want = {r: e for r, e in m["files"].items()
          if items is None or "/" not in r or r.split("/", 1)[0] in items}
  try:
    got = _entries(d, list(want))
  except FileNotFoundError as e:
    raise ChecksumError(f"{e.filename} is missing (listed in {MANIFEST_FILE})") from None
  for (r, e), g in zip(want.items(), got):
    if list(e) != g:
      raise ChecksumError(f"checksum mismatch in {d / r}: {g[0]} bytes, {ALGORITHM} "
                          f"{g[1][:12]}...; {MANIFEST_FILE} says {e[0]} bytes, {e[1][:12]}...")
  return True
