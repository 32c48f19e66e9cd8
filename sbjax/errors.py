"""How sbjax declares and reports invalid settings: one line naming the field, the value given
and what is allowed (``what`` names a setting that is no ``Config`` field)::

    invalid config: train.seed=-1; allowed: an integer >= 0 and <= 4294967295

A dataclass field declares what it allows where it is declared, with ``bounded``::

    lr: float = bounded(1e-3, gt=0)                    # a finite number > 0
    seed: int = bounded(0, lo=0, hi=SEED_MAX)
    pos: str = bounded("rotary", choices=POS_KINDS)

and the dataclass's ``__post_init__`` calls ``check_fields(self, "model")`` before any check
across fields: an ``int`` field holds an integer (never a bool), a ``float`` field a finite
number (``finite=False`` lets inf through) within ``lo <= x <= hi`` (``gt``, ``lt``: open
ends), a ``str`` field text, one of ``choices`` when given.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import sys
import tempfile
import traceback
from typing import Any

SEED_MAX = 2**32 - 1  # jax.random.key folds larger seeds onto these: distinct seeds would collide
STEP_MAX = 2**31 - 1  # steps are counted in int32 on the device


def config_error(field: str, value: Any, allowed: str, what: str = "config") -> ValueError:
  return ValueError(f"invalid {what}: {field}={value!r}; allowed: {allowed}")


@dataclasses.dataclass(frozen=True)
class Bounds:
  lo: float | None = None  # x >= lo
  hi: float | None = None  # x <= hi
  gt: float | None = None  # x > gt
  lt: float | None = None  # x < lt
  choices: tuple = ()
  finite: bool = True
  note: str = ""

  def ends(self):
    return [(op, v) for op, v in ((">=", self.lo), (">", self.gt), ("<=", self.hi),
                                  ("<", self.lt)) if v is not None]

  def allowed(self, kind: str) -> str:
    noun = {"int": "an integer", "str": "a string"}.get(kind, "a finite number" if self.finite
                                                      else "a number")
    ends = [f"{op} {v}" for op, v in self.ends()]
    text = " | ".join(map(str, self.choices)) or " and ".join([f"{noun} {e}" for e in ends[:1]]
                                                              + ends[1:]) or noun
    return f"{text} ({self.note})" if self.note else text

  def admits(self, kind: str, v) -> bool:
    if self.choices or kind == "str":
      return v in self.choices if self.choices else isinstance(v, (str, os.PathLike))
    if isinstance(v, bool) or not isinstance(v, int if kind == "int" else numbers.Real):
      return False
    if kind == "float" and (math.isnan(v) or self.finite and math.isinf(v)):
      return False
    return all({">=": v >= b, ">": v > b, "<=": v <= b, "<": v < b}[op] for op, b in self.ends())


def bounded(default, *, lo=None, hi=None, gt=None, lt=None, choices=(), finite=True,
            note: str = "") -> Any:
  """A dataclass field with ``default`` that allows what the keywords say (module doc)."""
  rule = Bounds(lo, hi, gt, lt, tuple(choices), finite, note)
  return dataclasses.field(default=default, metadata={"bounds": rule})


def check_fields(obj, prefix: str, what: str = "config") -> None:
  """Refuse the first field of the dataclass ``obj`` that its declaration (or its base's) does
  not allow, naming ``prefix.field``; an undeclared int, float or str field is checked for its
  type (a float: a finite number)."""
  for f in dataclasses.fields(obj):
    rules = [c.__dataclass_fields__[f.name].metadata.get("bounds") for c in type(obj).__mro__
             if f.name in getattr(c, "__dataclass_fields__", {})]
    rule = next(filter(None, rules), Bounds() if f.type in ("int", "float", "str") else None)
    v = getattr(obj, f.name)
    if rule is not None and not rule.admits(f.type, v):
      raise config_error(f"{prefix}.{f.name}" if prefix else f.name, v, rule.allowed(f.type), what)


def write_log(e: BaseException) -> str:
  """The command line and the full traceback in a new file of the system's temp folder (never in
  a folder of the command's, which a refused command leaves as it was): its path."""
  fd, path = tempfile.mkstemp(prefix=f"sbjax-{os.path.basename(sys.argv[0])}-", suffix=".log")
  with os.fdopen(fd, "w") as f:
    f.write(" ".join(sys.argv) + "\n\n" + "".join(traceback.format_exception(e)))
  return path
