"""The ``tokens`` data source: token ids already on disk, cut into windows of T+1 tokens.

Two file kinds (``data.options.path``, and ``data.options.val_path`` for validation):

* an integer ``.npy`` (memory-mapped, never unpickled): ``[n, W]`` rows of W >= T+1 tokens
  (e.g. Pythia's batch-viewer ``[n, 2049]``), each giving ``(W - 1) // T`` windows at columns
  ``0, T, 2T, ...``, rows in file order; or ``[N]``, one flat stream;
* a flat binary file (any other suffix, e.g. ``.bin``, ``np.memmap``), a stream cut every T
  tokens. Raw bytes do not say how wide an id is, so the file declares it: by its name
  (``x.uint16.bin``, ``x.int32.bin``: any of ``DTYPES``) or by ``data.options.dtype``; a file
  that declares none, or a dtype its name contradicts, is refused with the fix.

Window ``k`` is ``flat[start_k : start_k + T + 1]`` of the file's tokens in C order, with
``start_k = r * W + c * T`` (row r, window c of the row) or ``k * T`` (stream).

Splits: with ``val_path`` the validation windows are that file's (it may be the train file
itself: the analysis measures every window of ``--tokens=FILE``); without it, the last
``max(B, round(val_fraction * n_windows))`` windows are held out (a contiguous tail).
Training batches follow ``sbjax.data.dataset.Dataset``; evaluation windows are the first
``n * B`` in file order (as the papers' ``[n, T+1]`` batches).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from sbjax.data.options import TOKEN_DTYPES as DTYPES
from sbjax.data.text import DataError
from sbjax.paths import local_file


def declared_dtype(path, dtype: str = "") -> str:
  """The item type a flat token file declares: its name's (``x.int32.bin``), else ``dtype``
  (``data.options.dtype``); DataError with the fix when it declares none or two."""
  parts = Path(path).name.split(".")
  named = parts[-2] if len(parts) >= 3 and parts[-2] in DTYPES else None
  if named and dtype and dtype != named:
    raise DataError(f"token file {path} is named as {named} ids but data.options.dtype={dtype}; "
                    f"drop data.options.dtype (the name's {named} is used) or rename the file "
                    f"to end in .{dtype}.bin if it holds {dtype} ids")
  if not (named or dtype):
    stem = Path(path).name.removesuffix(".bin")
    raise DataError(f"token file {path} does not say how wide its ids are (a flat file of "
                    "raw integers); name it by its dtype, e.g. "
                    f"{stem}.uint16.bin or {stem}.int32.bin (one of {' | '.join(DTYPES)}), or set "
                    "data.options.dtype")
  return named or dtype


def read_tokens(path: str | os.PathLike, dtype: str = "") -> np.ndarray:
  """The token array of a file, memory-mapped: ``[n, W]`` or ``[N]`` (see the module doc); a
  remote file (``gs://``) is read from its local copy (``sbjax.paths.local_file``)."""
  try:
    p = Path(local_file(path))
  except FileNotFoundError:
    p = None
  if p is None or not p.is_file():
    raise DataError(f"token file not found: {path}; pass an integer .npy [n, T+1] or a flat "
                    "token .bin (data.options.path or data.options.val_path; an experiment's --data=)")
  if p.suffix == ".npy":
    try:
      arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
      raise DataError(f"token file {path} is not a plain numpy array ({e})") from None
    if arr.dtype.kind not in "iu":
      raise DataError(f"token file {path} holds {arr.dtype} values; token ids must be integers")
    if arr.ndim not in (1, 2):
      raise DataError(f"token file {path} has shape {arr.shape}; expected [n, T+1] windows or "
                      "a flat [N] stream")
    return arr
  if dtype and dtype not in DTYPES:
    raise DataError(f"data.options.dtype={dtype!r} is not supported; allowed: {' | '.join(DTYPES)}")
  dtype = declared_dtype(path, dtype)
  size = p.stat().st_size
  item = np.dtype(dtype).itemsize
  if size % item:
    raise DataError(f"token file {path} has {size} bytes, not a multiple of the {dtype} item "
                    f"size {item}: a truncated file or another dtype (data.options.dtype)")
  if size == 0:
    raise DataError(f"token file {path} is empty")
  return np.memmap(p, dtype=np.dtype(dtype), mode="r")


def window_starts(arr: np.ndarray, seq_len: int, where: str = "") -> np.ndarray:
  """Flat start offsets (int64) of the windows of T+1 = seq_len+1 tokens of ``arr``."""
  t = int(seq_len)
  if arr.ndim == 2:
    n, w = arr.shape
    if w < t + 1:
      raise DataError(f"{where}rows hold {w} tokens, shorter than seq_len+1={t + 1}: each "
                      f"window needs T+1 tokens (T inputs and their next tokens). Use "
                      f"train.seq_len={w - 1} or less (analysis: the rows' length "
                      "sets T), or a file with longer rows")
    per_row = (w - 1) // t
    return (np.arange(n, dtype=np.int64)[:, None] * w
            + np.arange(per_row, dtype=np.int64)[None, :] * t).reshape(-1)
  return np.arange(max(0, (arr.shape[0] - 1) // t), dtype=np.int64) * t


def check_ids(arr: np.ndarray, vocab_size: int, where: str = "", what: str = "vocab_size",
              chunk: int = 1 << 24) -> None:
  """DataError naming the first id outside [0, vocab_size) (scanned in chunks, mmap-friendly)."""
  flat = arr.reshape(-1)
  for c0 in range(0, flat.shape[0], chunk):
    part = np.asarray(flat[c0:c0 + chunk])
    bad = np.flatnonzero((part >= vocab_size) | (part < 0)) if part.dtype.kind == "i" else \
        np.flatnonzero(part >= vocab_size)
    if bad.size:
      i = c0 + int(bad[0])
      pos = f"row {i // arr.shape[1]}, column {i % arr.shape[1]}" if arr.ndim == 2 else f"index {i}"
      raise DataError(
          f"{where}token id {int(flat[i])} at {pos} is outside [0, {what}={vocab_size}) "
          f"(max id {int(np.max(flat))}): the tokens are not in this model's vocabulary. Use "
          "token ids from the model's own tokenizer (or a larger vocabulary)")


def file_identity(path: str | os.PathLike) -> str:
  """A content hash of a token file (blake2b, 16 bytes): part of cache keys."""
  h = hashlib.blake2b(digest_size=16)
  with open(local_file(path), "rb") as f:
    for block in iter(lambda: f.read(1 << 22), b""):
      h.update(block)
  return h.hexdigest()


def open_token_splits(o, seq_len: int, global_batch_size: int) -> dict:
  """The ``tokens`` source of its ``TokensOptions`` (``path``, ``val_path``, ``dtype``,
  ``vocab``: 0 = the largest id + 1, ``val_fraction``), checked: the keyword
  arguments of ``sbjax.data.dataset.Dataset`` (arrays, window starts, vocab, info)."""
  train = read_tokens(o.path, o.dtype)
  t_starts = window_starts(train, seq_len, f"token file {o.path}: ")
  if o.val_path:
    val = read_tokens(o.val_path, o.dtype)
    v_starts = window_starts(val, seq_len, f"token file {o.val_path}: ")
  else:
    n_val = min(max(global_batch_size, int(round(o.val_fraction * len(t_starts)))),
                len(t_starts))
    val, v_starts, t_starts = train, t_starts[len(t_starts) - n_val:], t_starts[:len(t_starts) - n_val]
  vocab = int(o.vocab)
  files = [(o.path, train)] + ([(o.val_path, val)] if o.val_path
                                        and o.val_path != o.path else [])
  if vocab:
    for path, arr in files:
      check_ids(arr, vocab, f"token file {path}: ", "data.options.vocab")
  else:
    vocab = max(int(np.max(arr)) for _, arr in files) + 1
    for path, arr in files:
      if int(np.min(arr)) < 0:
        check_ids(arr, vocab, f"token file {path}: ")
  extra = {"tokens_path": o.path, "tokens_val_path": o.val_path,
           "tokens_shape": list(train.shape), "tokens_dtype": str(train.dtype)}
  return dict(train_tokens=train, val_tokens=val, starts=(t_starts, v_starts), vocab_size=vocab,
              name=Path(o.path).name, source="tokens", extra_info=extra)
