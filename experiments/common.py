"""What the experiments' declarations share: tables in and out, number formatting for report
tables, the one-line reading of a Welch comparison, and the choices two experiments make alike
(the parameter-matched rank, the lr of the smallest mean)."""

from __future__ import annotations

import math

from sbjax import overrides
from sbjax.analysis.table import read_csv as read_rows, write_csv as write_rows
from sbjax.atomic import atomic_write_json as write_json
from sbjax.heads import head_param_count

__all__ = ["fmt", "read_rows", "write_rows", "write_json", "md_table", "welch_line",
           "matched_rank", "mean", "best_lr"]


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


def matched_rank(cfg, target: int) -> int:
  """The model.head.rank in 1..d whose head parameter count (``cfg``'s head kind's formula) is
  closest to ``target`` (ties: the smaller rank)."""
  def count(r):
    return head_param_count(overrides.apply(cfg, {"model.head.rank": r}).model)
  return min(range(1, cfg.model.d_model + 1), key=lambda r: (abs(count(r) - target), r))


def mean(xs) -> float:
  """The mean of a list, summed in its order (the one arithmetic of every lr choice)."""
  return sum(xs) / len(xs)


def best_lr(means: dict):
  """The lr of the smallest mean in ``means`` ({lr: mean}); a non-finite mean never wins (a
  diverged run); ties: the first."""
  return min(means, key=lambda lr: means[lr] if math.isfinite(means[lr]) else math.inf)
