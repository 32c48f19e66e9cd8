"""Builds a Hugging Face cache directory (the layout ``from_pretrained(..., revision=R,
cache_dir=C)`` leaves) from saved model directories, for tests (no network)."""

import hashlib
import os
import shutil
from pathlib import Path


def write_hf_cache(cache: Path, repo_id: str, revisions: dict) -> Path:
  """``cache/models--org--name/{blobs/<sha256>, snapshots/<commit>/<file> -> blob,
  refs/<revision>}`` for ``revisions`` = {revision name: a save_pretrained directory}.
  Equal files share one blob, as in the real cache; returns the repository directory."""
  repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
  (repo / "blobs").mkdir(parents=True, exist_ok=True)
  for rev, src in revisions.items():
    files = sorted(p for p in Path(src).iterdir() if p.is_file())
    commit = hashlib.sha1(b"".join(hashlib.sha256(p.read_bytes()).digest() for p in files)
                          + rev.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for p in files:
      blob = repo / "blobs" / hashlib.sha256(p.read_bytes()).hexdigest()
      if not blob.exists():
        shutil.copyfile(p, blob)
      os.symlink(os.path.relpath(blob, snap), snap / p.name)
    ref = repo / "refs" / rev
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
  return repo
