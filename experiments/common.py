"""What the experiments' declarations share: tables in and out, number formatting for report
tables, and the one-line reading of a Welch comparison."""

from __future__ import annotations

import math

from sbjax.analysis.table import read_csv, write_csv
from sbjax.atomic import atomic_write_json
from sbjax.paths import upath

__all__ = ["fmt", "read_rows", "write_rows", "write_json", "md_table", "welch_line", "upath"]


def read_rows(path, text: tuple = ()) -> list[dict]:
  return read_csv(path, text)


def write_rows(path, rows) -> None:
  write_csv(path, rows)


def write_json(path, obj) -> None:
  atomic_write_json(path, obj)


def fmt(v, nd: int = 4, spec: str | None = None) -> str:
  """A number for a report table: '–' for None/''/NaN, integers without decimals, floats with
  ``nd`` significant digits (or the format ``spec``), anything else as text."""
  if v is None or v == "":
    return "–"
  if isinstance(v, (bool, str)):
    return str(v)
  x = float(v)
  if not math.isfinite(x):
    return "–"
  if spec is not None:
    return format(x, spec)
  return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.{nd}g}"


def md_table(rows: list[dict], columns: list[str], spec: str | None = ".4f") -> list[str]:
  """A markdown table of ``columns`` of ``rows`` (numbers with ``fmt``)."""
  def cell(v):
    whole = isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer()
    return fmt(v, spec=None if whole else spec)

  out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
  return out + ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]


def welch_line(what: str, w: dict, n_a: int, n_b: int) -> str:
  """"<what>: diff nats, 95% Welch CI [lo, hi] over n_a + n_b seeds: verdict" (a verdict that
  follows mechanically from the interval: above 0, below 0, or covering it)."""
  f = lambda v: fmt(v, spec=".4f")  # noqa: E731
  return (f"{what}: {f(w['diff'])} nats, 95% Welch CI [{f(w['lo'])}, {f(w['hi'])}] over "
          f"{n_a} + {n_b} seeds: **{w['verdict']}**")
