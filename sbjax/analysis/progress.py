"""Progress of an analysis over checkpoints: a tqdm bar on a terminal, log lines otherwise.

On a TTY the bar shows checkpoints done / total (cached ones count as done from the
start), the rate and tqdm's ETA. When stderr is not a terminal (a log file, a TPU job)
one plain line per computed group is written instead, never a ``\\r`` fragment::

    [analyze run] 6/11 checkpoints (step 64), elapsed 0m41s, ETA 0m35s

The ETA of those lines is the time per checkpoint of the groups after the first (the
first compiles), or of the first while it is the only one, times the checkpoints left.
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


def fmt_time(s: float) -> str:
  s = int(max(s, 0))
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class CheckpointProgress:
  """``update(n, note)`` after each computed group of n checkpoints; ``close()`` at the end."""

  def __init__(self, total: int, done: int, enabled: bool, name: str, stream=None):
    self.stream = stream or sys.stderr
    self.total, self.done, self.name = total, done, name
    self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
    self.lines = enabled and not self.tty
    self.t0 = time.perf_counter()
    self.first = None  # (time, checkpoints computed) after the first group
    self.computed = 0
    self.bar = tqdm(total=total, initial=done, desc=f"analyze {name}", unit="ckpt",
                    file=self.stream, disable=not (enabled and self.tty), dynamic_ncols=True)
    if self.lines:
      cached = f" ({done} cached)" if done else ""
      self._line(f"{done}/{total} checkpoints{cached}")

  def _line(self, text: str) -> None:
    self.stream.write(f"[analyze {self.name}] {text}\n")
    self.stream.flush()

  def _eta(self, now: float) -> str:
    if self.first is None or self.computed == 0:
      return "?"
    t1, n1 = self.first
    rate = ((now - t1) / (self.computed - n1) if self.computed > n1
            else (t1 - self.t0) / max(n1, 1))
    return fmt_time(rate * (self.total - self.done))

  def update(self, n: int, note: str = "") -> None:
    now = time.perf_counter()
    self.done += n
    self.computed += n
    if self.first is None:
      self.first = (now, self.computed)
    self.bar.update(n)
    if note:
      self.bar.set_postfix_str(note, refresh=self.tty)
    if self.lines:
      what = f"{self.done}/{self.total} checkpoints" + (f" {note}" if note else "")
      self._line(f"{what}, elapsed {fmt_time(now - self.t0)}, ETA {self._eta(now)}")

  def close(self) -> None:
    self.bar.close()
