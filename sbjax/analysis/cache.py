"""The resumable per-checkpoint cache of an analysis.

Layout (under the analysis output directory, by default ``WORKDIR/analysis``)::

    cache/step_<n>.json        {"key", "step", "row", "spectrum_top"} of one checkpoint
    cache/cka_reference.npz    the final checkpoint's CKA activations (+ its key)

Every entry stores the key it was computed under. The *run key* hashes the
analysis settings that change any number (see ``Settings.cache_fields``), the
run's config.json, the sbjax version and, when CKA is on, the final step (the
CKA reference). A *step key* adds the step and the modification time of the
checkpoint's directory (a rewritten checkpoint is recomputed). An entry whose
key differs is ignored and overwritten, so a changed flag invalidates the
cache without deleting anything up front. Files are written atomically
(temporary file + ``os.replace``), so a killed analysis leaves only complete
entries.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from sbjax.analysis.table import atomic_write_bytes, atomic_write_json
from sbjax.atomic import is_local
from sbjax.paths import upath


def digest(obj) -> str:
  """A short stable hash of a JSON-able object."""
  s = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
  return hashlib.blake2b(s.encode(), digest_size=12).hexdigest()


class Cache:
  """Per-step JSON entries and the CKA reference, all keyed by ``run_key``."""

  def __init__(self, directory, run_key: str, enabled: bool = True):
    self.dir = upath(directory)
    self.run_key = run_key
    self.enabled = enabled

  def step_key(self, step: int, ckpt_mtime_ns: int | None) -> str:
    return digest({"run": self.run_key, "step": int(step), "mtime": ckpt_mtime_ns})

  def _step_path(self, step: int) -> Path:
    return self.dir / f"step_{int(step)}.json"

  def get(self, step: int, key: str) -> dict | None:
    if not self.enabled:
      return None
    p = self._step_path(step)
    try:
      rec = json.loads(p.read_text())
    except (OSError, ValueError):
      return None  # missing, or unreadable (then it is recomputed and overwritten)
    if rec.get("key") != key or rec.get("step") != int(step):
      return None
    return rec

  def put(self, step: int, key: str, row: dict, spectrum_top=None) -> None:
    if not self.enabled:
      return
    self.dir.mkdir(parents=True, exist_ok=True)
    rec = {"key": key, "step": int(step), "row": row,
           "spectrum_top": None if spectrum_top is None else [float(x) for x in spectrum_top]}
    atomic_write_json(self._step_path(step), rec)

  # --- CKA reference (the final checkpoint's activations) ------------------------------------
  def _ref_path(self) -> Path:
    return self.dir / "cka_reference.npz"

  def get_reference(self) -> dict | None:
    if not self.enabled:
      return None
    p = self._ref_path()
    if not p.exists():
      return None
    try:
      with np.load(io.BytesIO(p.read_bytes()), allow_pickle=False) as z:
        if str(z["key"]) != self.run_key:
          return None
        return {k: np.asarray(z[k]) for k in z.files if k != "key"}
    except (OSError, ValueError, KeyError):
      return None

  def put_reference(self, arrays: dict) -> None:
    if not self.enabled:
      return
    self.dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, key=np.asarray(self.run_key), **arrays)
    atomic_write_bytes(self._ref_path(), buf.getvalue())


def mtime_ns(path) -> int | None:
  try:
    if is_local(path):
      return os.stat(path).st_mtime_ns
    return int((upath(path) / "commit_success.txt").stat().mtime * 10**9)  # no dir mtime there
  except OSError:
    return None
