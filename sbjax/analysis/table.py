"""Plain-CSV tables of per-checkpoint rows (no pandas), written atomically.

``write_csv(path, rows)`` writes the union of the rows' keys as columns (in
first-seen order; ``step`` first), empty cells for missing values, floats with
``repr`` (round-trips exactly; ``nan``/``inf`` as Python spells them).
``read_csv(path)`` gives back a list of dicts: ``step`` as int, every other
numeric cell as float, empty cells as NaN, and non-numeric text unchanged.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Sequence

import numpy as np

from sbjax.atomic import atomic_write_text
from sbjax.paths import upath


def _fmt(v) -> str:
  if v is None:
    return ""
  if isinstance(v, np.generic):  # first: np.float64 is a float, whose repr is "np.float64(x)"
    return _fmt(v.item())
  if isinstance(v, bool):
    return str(int(v))
  if isinstance(v, float):
    return repr(v)
  return str(v)


def write_csv(path, rows: Sequence[dict]) -> None:
  """Write rows atomically (module doc)."""
  seen = dict.fromkeys(k for r in rows for k in r)
  cols = (["step"] if "step" in seen else []) + [k for k in seen if k != "step"]
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(cols)
  for r in rows:
    w.writerow([_fmt(r.get(c)) for c in cols])
  atomic_write_text(path, buf.getvalue())


def _parse(key: str, s: str):
  if s == "":
    return math.nan
  if key == "step":
    try:
      return int(s)
    except ValueError:
      return int(float(s))
  try:
    return float(s)
  except ValueError:
    return s


def read_csv(path, text: tuple = ()) -> list[dict]:
  """Rows of a CSV written by :func:`write_csv` (``step`` int, numbers float, empty = NaN);
  the columns named in ``text`` stay strings as written (a token piece "007" or "1")."""
  path = upath(path)
  if not path.exists():
    raise FileNotFoundError(f"no such CSV: {path}")
  reader = csv.DictReader(io.StringIO(path.read_bytes().decode(), newline=""))
  return [{k: v if k in text else _parse(k, v) for k, v in r.items()} for r in reader]
