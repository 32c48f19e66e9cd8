"""The one progress reporter of sbjax: a tqdm bar when the stream is a terminal, plain log
lines (never a ``\\r`` fragment) when it is a file or a job's log, on stderr by default so
that stdout carries only results. Its users (the training loop, the analysis, an
experiment's runs) say what they count and when they write a line.
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def fmt_time(s: float) -> str:
  """``1m01s``, ``1h02m05s`` (negative times read 0)."""
  s = int(max(s, 0))
  return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Reporter:
  """A bar on a terminal (``enabled`` and a TTY stream), else ``line`` writes
  ``[name] text`` lines (when ``enabled``)."""

  def __init__(self, name: str, total: int, unit: str, *, initial: int = 0, stream=None,
               enabled: bool = True):
    self.name, self.stream = name, stream or sys.stderr
    self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
    self.lines = enabled and not self.tty
    self.bar = tqdm(total=total, initial=initial, desc=name, unit=unit, file=self.stream,
                    disable=not (enabled and self.tty), dynamic_ncols=True)

  def advance(self, n: int = 1, note: str = "") -> None:
    """Move the bar ``n`` forward, with ``note`` after it (no-op off a terminal)."""
    if note:
      self.bar.set_postfix_str(note, refresh=False)
    self.bar.update(n)

  def line(self, text: str) -> None:
    if self.lines:
      self.stream.write(f"[{self.name}] {text}\n")
      self.stream.flush()

  def close(self) -> None:
    self.bar.close()
