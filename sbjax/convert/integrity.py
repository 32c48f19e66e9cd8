"""Integrity of an imported series: weight hashes, truncation, duplicated revisions.

At import every selected revision is checked BEFORE anything is written:

* its weight files (``weight_files``: the safetensors shards of the index, or
  ``model.safetensors``, or every ``*.safetensors``; pickles with ``allow_pickle``) are
  hashed with sha256 (``files``); in an HF cache a file is a link to ``blobs/<sha256>`` and
  a content that does not match that name is refused (a corrupt or partial download);
* every safetensors header is parsed and checked (``sbjax.convert.st_io``: a truncated or
  malformed file is refused, naming the revision and the file);
* weights holding NaN or inf are refused, naming the tensors, unless ``allow_nonfinite``;
* ``weights_sha256`` = sha256 over the sorted (file name, file sha256) pairs of a revision.

Duplicates: revisions with equal ``weights_sha256`` hold the same weights (some public
series have ``stepN`` branches that hold another step's weights, e.g. step 0 equal to the
final model). ``duplicate_of`` of a revision = the final (largest) step when it equals the
final revision, else the smallest step with the same hash, else ``None`` (the first of a
group and the final revision itself are not duplicates, except an earlier revision equal to
the final one). Step 0 equal to the last step gets its own warning: CKA-to-final would read
1.0 at initialisation.

The record is ``WORKDIR/import.json``: ``{"source", "layout", "revisions": [{"step", "name",
"path", "commit", "tokens", "files", "weights_sha256", "duplicate_of"}], "duplicates"}``;
later imports into the same workdir merge by step (``merge_record``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from sbjax.atomic import atomic_write_text

from sbjax.convert import hf_import, st_io
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


def weight_files(path: str, allow_pickle: bool = False) -> list[str]:
  """The weight files ``hf_import.load_hf_tensors`` reads from a revision directory."""
  d = Path(path)
  if (d / hf_import.SAFE_INDEX).is_file():
    return hf_import._shards(path, hf_import.SAFE_INDEX)  # noqa: SLF001 - same module family
  if (d / hf_import.SAFE_SINGLE).is_file():
    return [hf_import.SAFE_SINGLE]
  files = sorted(p.name for p in d.iterdir() if p.name.endswith(".safetensors"))
  if files:
    return files
  if allow_pickle:
    if (d / hf_import.PICKLE_INDEX).is_file():
      return hf_import._shards(path, hf_import.PICKLE_INDEX)  # noqa: SLF001
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".bin"))
  return []  # load_hf_tensors gives the error (no weights / pickles only)


def check_revision(name: str, path: str, allow_pickle: bool = False,
                   allow_nonfinite: bool = False) -> dict:
  """{"files": {file: sha256}, "weights_sha256"} of one revision; ValueError naming the
  revision and file for a truncated safetensors file or a blob whose content does not
  match its sha256 name, and naming the tensors that hold NaN or inf (unless
  ``allow_nonfinite``)."""
  files = {}
  for f in weight_files(path, allow_pickle):
    full = os.path.join(path, f)
    if f.endswith(".safetensors"):
      try:
        st_io.read_file(full)
      except ValueError as e:
        raise ValueError(f"revision {name!r}: weight file {f} is truncated or corrupt ({e}); "
                         "nothing was imported. Download the revision again") from None
    digest = sha256_file(full)
    blob = os.path.basename(os.path.realpath(full))
    if os.path.islink(full) and len(blob) == 64 and set(blob) <= _HEX and blob != digest:
      raise ValueError(f"revision {name!r}: weight file {f} links to blob {blob} but its "
                       f"content hashes to {digest} (a corrupt or partial download); nothing "
                       "was imported. Download the revision again")
    files[f] = digest
  if files and not allow_nonfinite:
    hf_import.check_finite(hf_import.load_hf_tensors(path, allow_pickle=allow_pickle),
                           f"revision {name!r}: ")
  total = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()
  return {"files": files, "weights_sha256": total}


def mark_duplicates(records: list[dict]) -> list[dict]:
  """Set ``duplicate_of`` on every record (see the module doc); returns the duplicates."""
  records.sort(key=lambda r: r["step"])
  if not records:
    return []
  final = records[-1]
  first = {}
  for r in records:
    first.setdefault(r["weights_sha256"], r["step"])
  dups = []
  for r in records:
    r["duplicate_of"] = None
    if r is not final and r["weights_sha256"] == final["weights_sha256"]:
      r["duplicate_of"] = final["step"]
    elif first[r["weights_sha256"]] != r["step"] and r is not final:
      r["duplicate_of"] = first[r["weights_sha256"]]
    if r["duplicate_of"] is not None:
      dups.append(r)
  return dups


def warn_duplicates(dups: list[dict], records: list[dict], where: str = "") -> None:
  last = max(r["step"] for r in records) if records else None
  for r in dups:
    if r["step"] == 0 and r["duplicate_of"] == last:
      msg = (f"{where}step 0 holds the same weights as the last step {last}: the series is "
             "aliased (CKA-to-final would read 1.0 at step 0); the analysis refuses it unless "
             "--allow_duplicates")
    else:
      msg = (f"{where}revision {r['name']!r} (step {r['step']}) holds the same weights as step "
             f"{r['duplicate_of']} (sha256 {r['weights_sha256'][:12]}…); flagged duplicate_of="
             f"{r['duplicate_of']}, refused by the analysis unless --allow_duplicates")
    log.warning(msg)


def read_record(workdir) -> dict | None:
  p = upath(workdir) / RECORD
  return json.loads(p.read_text()) if p.is_file() else None


def merge_record(workdir, source: str, layout: str, new: list[dict]) -> dict:
  """Merge ``new`` revision records into WORKDIR/import.json (by step), re-mark the
  duplicates over all of them, write it atomically and return it."""
  old = read_record(workdir) or {"revisions": []}
  by_step = {r["step"]: r for r in old["revisions"]}
  by_step.update({r["step"]: r for r in new})
  revs = list(by_step.values())
  dups = mark_duplicates(revs)
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
