"""Plain-text corpora: scan a directory of ``.txt`` files, split by document, tokenise.

Policy for a directory corpus (``data.source="text"``):

* every ``*.txt`` file under the directory (recursively, sorted by relative path) is one
  document; other files are ignored. A file that is not valid UTF-8 (a leading BOM is
  dropped), is empty or holds NUL characters is skipped with a warning naming it; a missing
  directory, or one without a usable ``.txt`` file, is a ``DataError`` naming the path;
* train/validation split by document: documents are ordered by a hash of their relative
  path and the first ``max(1, round(val_fraction * n))`` (at most ``n - 1``) go to
  validation (deterministic, independent of file-system order). A single document is split
  at the line boundary nearest to ``(1 - val_fraction)`` of its length (train first);
* the corpus identity is a hash of every file's relative path, size and content: with
  ``val_fraction`` it keys the token caches, so a changed corpus is never silently reused.

Documents are joined into one token stream with the tokenizer's separator (eos) id after
each; the streams are cached as ``.npy`` files (uint16 when the vocab fits, else int32).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import re
import warnings
from typing import Callable, Sequence

import numpy as np

from sbjax.atomic import atomic_path
from sbjax.paths import files_under, local_file, upath


class DataError(ValueError):
  """A problem with the data a config points at (missing, empty, too small, unreadable)."""


@dataclasses.dataclass(frozen=True)
class TextCorpus:
  """Documents (name, text) of a directory, in sorted name order."""

  docs: tuple  # ((name, text), ...)
  skipped: tuple  # names of files skipped (non-UTF-8 or empty)
  identity: str  # hash of (name, size, content) of every .txt file


def _read_doc(raw: bytes) -> tuple[str, str]:
  """(the text of a usable file, "") or ("", why it is skipped)."""
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    return "", f"not valid UTF-8 ({e.reason} at byte {e.start})"
  if not text.strip():
    return "", "empty"
  if "\0" in text:
    return "", (f"it holds NUL characters ({text.count(chr(0))} of {len(text)}): a zero-filled "
                "or binary file, not text; fix or remove it")
  return text, ""


def scan_text_dir(path: str | os.PathLike) -> TextCorpus:
  """Reads every ``.txt`` file under ``path`` (see the module docstring for the policy); a
  ``gs://`` (any ``sbjax.paths`` scheme) folder is read through etils.epath."""
  root, flag = upath(path), "data.options.path"
  if not root.exists():
    raise DataError(f"text corpus directory does not exist: {path}; set {flag} to a directory "
                    "of UTF-8 .txt files")
  if not root.is_dir():
    raise DataError(f"text corpus path is not a directory: {path}; set {flag} to a directory "
                    "of UTF-8 .txt files")
  files = files_under(root, ".txt")
  if not files:
    raise DataError(f"text corpus directory has no .txt files: {path}; put UTF-8 .txt files "
                    f"there or set {flag} to another directory")
  docs, skipped = [], []
  h = hashlib.blake2b(digest_size=16)
  for f in files:
    name = f.relative_to(root).as_posix()
    raw = f.read_bytes()
    h.update(f"{name}\0{len(raw)}\0".encode())
    h.update(hashlib.blake2b(raw, digest_size=16).digest())
    text, why = _read_doc(raw)
    if why:
      warnings.warn(f"skipping {f}: {why}", stacklevel=2)
      skipped.append(name)
    else:
      docs.append((name, text))
  if not docs:
    raise DataError(f"text corpus directory {path} has no usable .txt file: skipped "
                    f"{skipped} (not valid UTF-8, empty, or holding NUL characters); fix them "
                    f"or set {flag} to another directory")
  return TextCorpus(tuple(docs), tuple(skipped), h.hexdigest())


def split_documents(docs: Sequence[tuple[str, str]], val_fraction: float
                    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
  """(train, validation) documents; see the module docstring."""
  docs = list(docs)
  if not docs:
    raise DataError("no documents to split")
  if len(docs) == 1:
    name, text = docs[0]
    cut = int(round(len(text) * (1.0 - val_fraction)))
    nl = [m.end() for m in re.finditer("\n", text)]
    if nl:
      best = min(nl, key=lambda p: abs(p - cut))
      if 0 < best < len(text):
        cut = best
    cut = min(max(cut, 1), len(text) - 1)
    return [(name, text[:cut])], [(name + "#val", text[cut:])]
  n_val = min(max(1, int(round(val_fraction * len(docs)))), len(docs) - 1)
  order = sorted(range(len(docs)), key=lambda i: hashlib.blake2b(
      f"split\0{docs[i][0]}\0".encode(), digest_size=16).hexdigest())
  val_idx = set(order[:n_val])
  train = [d for i, d in enumerate(docs) if i not in val_idx]
  val = [d for i, d in enumerate(docs) if i in val_idx]
  return train, val


def slug(s: str, n: int = 32) -> str:
  """A file-name-safe lower-case name."""
  s = re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")
  return (s[:n] or "corpus")


def encode_documents(tok, texts: Sequence[str], chunk: int = 256) -> np.ndarray:
  """One stream: the tokens of every document followed by the separator id."""
  dtype = np.uint16 if tok.vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32
  sep = tok.separator_id
  parts = []
  for i in range(0, len(texts), chunk):
    ids = tok.encode(list(texts[i:i + chunk]))
    n = sum(len(x) + 1 for x in ids)
    flat = np.fromiter(itertools.chain.from_iterable(x + [sep] for x in ids), dtype=np.int64,
                       count=n)
    parts.append(flat.astype(dtype))
  return np.concatenate(parts) if parts else np.zeros(0, dtype)


def cached_array(path: str | os.PathLike | None, make: Callable[[], np.ndarray]) -> np.ndarray:
  """``np.load(path)`` (memory-mapped) if it exists, else ``make()`` saved atomically."""
  if path is None:
    return make()
  path = upath(path)
  if path.is_file():
    return np.load(local_file(path), allow_pickle=False, mmap_mode="r")
  arr = np.ascontiguousarray(make())
  with atomic_path(path) as tmp, open(tmp, "wb") as f:
    np.save(f, arr, allow_pickle=False)
  return arr
