"""Minimal, dependency-free safetensors reader/writer (numpy; bfloat16 via ml_dtypes).

The ``safetensors`` package's numpy API cannot read bfloat16, which many Hugging
Face checkpoints use, so sbjax parses the (simple) format itself: an 8-byte
little-endian header length, a JSON header ``{name: {dtype, shape,
data_offsets}}`` (plus optional ``__metadata__``), then the raw little-endian
tensor bytes. The header is checked as the package checks it (``_layout``: an object,
known dtypes, byte ranges that fit their shapes and tile the data section exactly: no
overlap, no gap, nothing truncated). Reading memory-maps the file, so headers (names and
shapes) are available without reading any tensor data.
"""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np

from sbjax.atomic import atomic_path

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_NAMES = {v: k for k, v in _DTYPES.items()}

_MAX_HEADER = 100 * 1024 * 1024


def _layout(path: str, header, data_bytes: int) -> dict:
  """The checked entries of a parsed header (the format's own rules, as the ``safetensors``
  package checks them): a JSON object of {name: {dtype, shape, data_offsets}}, every dtype
  known, every byte range its shape's size, the ranges contiguous from 0 to the end of the
  file (no gap, no overlap); ValueError naming the file and the first tensor that breaks one."""
  if not isinstance(header, dict):
    raise ValueError(f"{path}: not a safetensors file (its header is a JSON "
                     f"{type(header).__name__}, not an object)")
  header = {k: v for k, v in header.items() if k != "__metadata__"}
  spans = []
  for name, info in header.items():
    try:
      dt = _DTYPES[info["dtype"]]
      shape = tuple(int(x) for x in info["shape"])
      b, e = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as err:
      known = "" if not isinstance(err, KeyError) or err.args[0] in ("dtype", "shape",
                                                                     "data_offsets") else \
          f" (supported dtypes: {sorted(_DTYPES)})"
      raise ValueError(f"{path}: tensor {name!r} has a malformed entry {info!r}{known}") from None
    if min(shape, default=0) < 0 or e - b != dt.itemsize * int(np.prod(shape, dtype=np.int64)):
      raise ValueError(f"{path}: tensor {name!r} has offsets [{b}, {e}) that do not hold its "
                       f"shape {shape} of {info['dtype']}")
    spans.append((b, e, name))
  end = 0
  for b, e, name in sorted(spans):
    if b != end:
      raise ValueError(f"{path}: tensor {name!r} starts at byte {b}, not at {end} where the "
                       f"previous one ends ({'overlapping' if b < end else 'a gap'})")
    end = e
  if end != data_bytes:
    raise ValueError(f"{path}: the tensors end at byte {end} of a data section of {data_bytes} "
                     "bytes (a truncated or padded file)")
  return header


def read_header(path: str) -> dict:
  """The checked header of a safetensors file (``_layout``; without ``__metadata__``)."""
  with open(path, "rb") as f:
    raw = f.read(8)
    if len(raw) != 8:
      raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", raw)
    if n > _MAX_HEADER:
      raise ValueError(f"{path}: not a safetensors file (header length {n} is implausible)")
    try:
      header = json.loads(f.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ValueError(f"{path}: not a safetensors file (bad JSON header: {e})") from e
  return _layout(path, header, os.path.getsize(path) - 8 - n)


def read_file(path: str) -> dict[str, np.ndarray]:
  """All tensors of a safetensors file as read-only, lazily paged numpy arrays."""
  header = read_header(path)
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
  size = os.path.getsize(path)
  start = 8 + n
  mm = np.memmap(path, dtype=np.uint8, mode="r") if size > start else np.zeros(0, np.uint8)
  out = {}
  for name, info in header.items():
    b, e = info["data_offsets"]
    dt = _DTYPES[info["dtype"]]
    out[name] = mm[start + b:start + e].view(dt).reshape(tuple(info["shape"]))
  return out


def write_file(tensors: dict[str, np.ndarray], path: str, metadata: dict | None = None):
  """Write numpy arrays as a safetensors file (sorted names, 8-byte aligned header)."""
  header, chunks, off = {}, [], 0
  for name in sorted(tensors):
    a = np.ascontiguousarray(tensors[name])
    if a.dtype not in _NAMES:
      raise ValueError(f"cannot write tensor {name!r} of dtype {a.dtype} as safetensors")
    data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                    "data_offsets": [off, off + len(data)]}
    chunks.append(data)
    off += len(data)
  if metadata:
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  hb = json.dumps(header, separators=(",", ":")).encode()
  hb += b" " * (-len(hb) % 8)
  with atomic_path(path) as tmp, open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(hb)))
    f.write(hb)
    for c in chunks:
      f.write(c)
