"""Integrity of an imported series: weight hashes, truncation, duplicated revisions.

Every selected revision is checked before anything is written (``check_revision``): it is
imported (``hf_import.import_hf``: malformed files, missing or mis-shaped tensors, and NaN or
inf unless ``allow_nonfinite``, are refused), and each weight file is hashed (sha256); in
an HF cache a file is a link to ``blobs/<sha256>``, and content that does not match that name
is refused. ``weights_sha256`` = sha256 over the sorted (file name, file sha256) pairs.

Duplicates: revisions with equal ``weights_sha256`` hold the same weights (some public series
have ``stepN`` branches that hold another step's weights). ``duplicate_of`` of a revision =
the final (largest) step when it equals the final revision, else the smallest step with the
same hash, else ``None``.

The record is ``WORKDIR/import.json``: ``{"source", "layout", "revisions": [{"step", "name",
"commit", "tokens", "files", "weights_sha256", "duplicate_of"}], "duplicates"}``; later imports
into the same workdir merge by step (``merge_record``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

from sbjax.atomic import atomic_write_text

from sbjax.convert import hf_import
from sbjax.paths import upath

log = logging.getLogger("sbjax")
RECORD = "import.json"
_HEX = set("0123456789abcdef")


def sha256_file(path: str | os.PathLike, block: int = 1 << 22) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(block), b""):
      h.update(chunk)
  return h.hexdigest()


def check_revision(name: str, path: str, allow_pickle: bool = False,
                   allow_nonfinite: bool = False) -> dict:
  """{"files": {file: sha256}, "weights_sha256"} of one revision (module doc); ValueError
  naming the revision and what is wrong with its weights."""
  where = f"revision {name!r}: "
  try:
    hf_import.import_hf(path, allow_pickle=allow_pickle, allow_nonfinite=allow_nonfinite)
  except ValueError as e:
    raise ValueError(f"{where}{e}") from None
  files = {}
  for f in hf_import.weight_files(path, allow_pickle):
    full = os.path.join(path, f)
    digest, blob = sha256_file(full), os.path.basename(os.path.realpath(full))
    if os.path.islink(full) and len(blob) == 64 and set(blob) <= _HEX and blob != digest:
      raise ValueError(f"{where}weight file {f} links to blob {blob} but its content hashes to "
                       f"{digest} (a corrupt or partial download); nothing was imported. "
                       "Download the revision again")
    files[f] = digest
  total = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()
  return {"files": files, "weights_sha256": total}


def mark_duplicates(records: list[dict]) -> None:
  """Sort the records by step and set each one's ``duplicate_of`` (module doc)."""
  records.sort(key=lambda r: r["step"])
  first = {}
  for r in records:
    first.setdefault(r["weights_sha256"], r["step"])
  final = records[-1] if records else None
  for r in records:
    dup = first[r["weights_sha256"]]
    if r["weights_sha256"] == final["weights_sha256"]:
      dup = final["step"]
    r["duplicate_of"] = None if dup == r["step"] else dup


def read_record(workdir) -> dict | None:
  p = upath(workdir) / RECORD
  return json.loads(p.read_text()) if p.is_file() else None


def merge_record(workdir, source: str, layout: str, new: list[dict], where: str = "") -> dict:
  """Merge ``new`` revision records into WORKDIR/import.json (by step), re-mark the
  duplicates over all of them (a warning for each), write it atomically and return it."""
  old = read_record(workdir) or {"revisions": []}
  by_step = {r["step"]: r for r in old["revisions"]}
  by_step.update({r["step"]: r for r in new})
  revs = list(by_step.values())
  mark_duplicates(revs)
  dups = [r for r in revs if r["duplicate_of"] is not None]
  for r in dups:  # (e.g. step 0 equal to the last step: CKA-to-final would read 1.0 there)
    log.warning("%srevision %r (step %d) holds the same weights as step %d (sha256 %s…); "
                "flagged duplicate_of=%d, refused by the analysis unless --allow_duplicates",
                where, r["name"], r["step"], r["duplicate_of"], r["weights_sha256"][:12],
                r["duplicate_of"])
  rec = {"source": source, "layout": layout, "revisions": revs,
         "duplicates": {str(r["step"]): r["duplicate_of"] for r in dups}}
  atomic_write_text(upath(workdir) / RECORD, json.dumps(rec, indent=1))
  return rec


def duplicates_of(workdir) -> dict:
  """{step: duplicate_of} of an imported workdir (empty for a training run)."""
  rec = read_record(workdir)
  if rec is None:
    return {}
  return {int(r["step"]): r["duplicate_of"] for r in rec["revisions"]
          if r.get("duplicate_of") is not None}
