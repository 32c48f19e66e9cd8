"""Minimal, dependency-free safetensors reader/writer (numpy; bfloat16 via ml_dtypes).

The ``safetensors`` package's numpy API cannot read bfloat16, which many Hugging
Face checkpoints use, so sbjax parses the (simple) format itself: an 8-byte
little-endian header length, a JSON header ``{name: {dtype, shape,
data_offsets}}`` (plus optional ``__metadata__``), then the raw little-endian
tensor bytes. Reading memory-maps the file, so headers (names and shapes) are
available without reading any tensor data.
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


def read_header(path: str) -> dict:
  """The JSON header of a safetensors file (without ``__metadata__``)."""
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
  header.pop("__metadata__", None)
  return header


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
    dt = _DTYPES.get(info["dtype"])
    if dt is None:
      raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']!r}; "
                       f"supported: {sorted(_DTYPES)}")
    b, e = info["data_offsets"]
    shape = tuple(info["shape"])
    if start + e > size or e - b != dt.itemsize * int(np.prod(shape, dtype=np.int64)):
      raise ValueError(f"{path}: tensor {name!r} has inconsistent offsets (truncated file?)")
    out[name] = mm[start + b:start + e].view(dt).reshape(shape)
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
