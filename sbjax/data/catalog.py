"""Documents of a TFDS catalog dataset (``data.source=tfds``: ``lm1b``, ``c4/en``,
``tiny_shakespeare``, ...) already prepared in array_record format in a data dir, read by
``tfds.data_source`` (no TensorFlow needed). Tokenisation happens afterwards
(``sbjax.data.dataset``), with the run's tokenizer, into cached ``.npy`` streams.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from sbjax.data.text import DataError, split_documents


def _text(v: Any) -> str:
  if isinstance(v, bytes):
    return v.decode("utf-8", errors="replace")
  if isinstance(v, np.ndarray):
    return _text(v.item())
  return str(v)


def _read_all(source, key: str, limit: int = 0) -> list:
  n = len(source) if not limit else min(limit, len(source))
  out = []
  for s in range(0, n, 1024):
    idx = list(range(s, min(n, s + 1024)))
    try:
      recs = source.__getitems__(idx)
    except (AttributeError, TypeError):  # no batched read (e.g. under tfds.testing.mock_data)
      recs = [source[i] for i in idx]
    out.extend(r[key] for r in recs)
  return out


def _source(name: str, split: str, data_dir: str | None):
  return tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)


def read_catalog(name: str, data_dir: str | None, text_key: str = "text",
                 val_fraction: float = 0.1, max_docs: int = 0) -> dict:
  """Documents of a TFDS catalog dataset prepared (array_record) in ``data_dir``.

  Validation is the ``validation`` split, else ``test``; if neither exists, ``train`` is split
  by document like a text directory (``sbjax.data.text.split_documents``).
  ``max_docs > 0`` reads at most that many documents per split (the first ones).
  """
  try:
    train_src = _source(name, "train", data_dir)
  except Exception as e:  # noqa: BLE001 - TFDS raises many kinds; re-raise with context
    first = (str(e).strip().splitlines() or [""])[0][:300].rstrip(".: ")
    raise DataError(
        f"cannot open TFDS dataset {name!r} (split 'train') in data_dir="
        f"{data_dir or 'the TFDS default'}: {type(e).__name__}: {first}. Prepare it first in "
        f"array_record format, e.g. `tfds build {name} --file_format=array_record "
        "--data_dir=...`, and set data.options.data_dir") from e
  val_src, val_split = None, None
  for split in ("validation", "test"):
    try:
      val_src, val_split = _source(name, split, data_dir), split
      break
    except Exception:  # noqa: BLE001 - an absent split
      continue
  try:
    train = [_text(t) for t in _read_all(train_src, text_key, max_docs)]
  except KeyError as e:
    raise DataError(f"TFDS dataset {name!r} has no feature {text_key!r} "
                    "(data.options.text_key)") from e
  if val_src is None:
    if not train:
      raise DataError(f"TFDS dataset {name!r} split 'train' is empty")
    tr, va = split_documents([(f"{i:012d}", t) for i, t in enumerate(train)], val_fraction)
    train, val = [t for _, t in tr], [t for _, t in va]
    val_split = f"train (val_fraction={val_fraction} of the documents)"
  else:
    val = [_text(t) for t in _read_all(val_src, text_key, max_docs)]
  info = getattr(train_src, "dataset_info", None)
  full_name = getattr(info, "full_name", None) or name
  return {"train": train, "validation": val, "val_split": val_split, "full_name": full_name}
