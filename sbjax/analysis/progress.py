"""Progress of an analysis over checkpoints: a tqdm bar on a terminal, log lines otherwise.

On a TTY the bar shows checkpoints done / total (cached ones count as done from the
start), the rate and tqdm's ETA. When stderr is not a terminal (a log file, a TPU job)
one plain line per computed group is written instead, never a ``\\r`` fragment::

    [analyze run] 6/11 checkpoints (step 64), elapsed 0m41s, ETA 0m35s

The ETA of those lines is the time per checkpoint of the groups after the first (the
first compiles), or of the first while it is the only one, times the checkpoints left.
"""

from __future__ import annotations

import time

from sbjax.progress import Reporter, fmt_time  # noqa: F401  (fmt_time re-exported)


class CheckpointProgress:
  """``update(n, note)`` after each computed group of n checkpoints; ``close()`` at the end."""

  def __init__(self, total: int, done: int, enabled: bool, name: str, stream=None):
    self.total, self.done = total, done
    self.report = Reporter(f"analyze {name}", total, "ckpt", initial=done, stream=stream,
                           enabled=enabled)
    self.t0 = time.perf_counter()
    self.first = None  # (time, checkpoints computed) after the first group
    self.computed = 0
    cached = f" ({done} cached)" if done else ""
    self.report.line(f"{done}/{total} checkpoints{cached}")

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
    self.report.advance(n, note)
    what = f"{self.done}/{self.total} checkpoints" + (f" {note}" if note else "")
    self.report.line(f"{what}, elapsed {fmt_time(now - self.t0)}, ETA {self._eta(now)}")

  def close(self) -> None:
    self.report.close()
