"""An experiment's progress over many runs: ``RunsProgress`` (run i of n, total ETA; tqdm on
stderr, plain log lines when stderr is not a terminal) and ``SweepProgress``, the ``progress``
callback of ``sbjax.studies.rank_sweep.run_plan`` that drives it."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class RunsProgress:
  """An experiment's overall progress: run i of n with the total ETA (tqdm; plain log lines
  when stderr is not a terminal). The ETA is the mean time of the runs that trained so far
  times the runs left (runs read back as finished do not count towards the rate)."""

  def __init__(self, n: int, name: str, disable: bool = False):
    self.n, self.name, self.done, self.timed, self.seconds = n, name, 0, 0, 0.0
    self._t = None
    self._tty = sys.stderr.isatty()
    self._quiet = disable
    # a bar on a terminal; log lines (no carriage returns) when stderr is a file
    self.bar = tqdm(total=n, desc=name, unit="run", file=sys.stderr,
                    disable=disable or not self._tty, dynamic_ncols=True)

  def start(self, label: str) -> None:
    self._t = time.perf_counter()
    self.bar.set_postfix_str(label, refresh=self._tty)
    if not self._tty and not self._quiet:
      sys.stderr.write(f"[{self.name}] run {self.done + 1}/{self.n}: {label}\n")

  def finish(self, trained: bool = True) -> None:
    if self._t is not None and trained:
      self.seconds += time.perf_counter() - self._t
      self.timed += 1
    self._t = None
    self.done += 1
    self.bar.update(1)
    if not self._tty and not self._quiet and self.timed:
      eta = self.seconds / self.timed * (self.n - self.done)
      sys.stderr.write(f"[{self.name}] {self.done}/{self.n} runs done, ETA {eta:.0f} s\n")

  def close(self) -> None:
    self.bar.close()


class SweepProgress:
  """A ``progress`` callback that drives :class:`RunsProgress` from a study's messages
  (``"[i/n] NAME: training"`` / ``"...: done"``; RunsProgress counts, so the ``[i/n]`` is
  dropped): each message starts the next unit and finishes the one before; :meth:`finish`
  finishes the last."""

  def __init__(self, progress: RunsProgress, prefix: str = ""):
    self.progress, self.prefix, self._open, self._trained = progress, prefix, False, False

  def __call__(self, msg: str) -> None:
    self.finish()
    label = msg.split("] ", 1)[1] if msg.startswith("[") and "] " in msg else msg
    self.progress.start(self.prefix + label.rsplit(": ", 1)[0])
    self._open, self._trained = True, not msg.endswith(": done")

  def finish(self) -> None:
    if self._open:
      self.progress.finish(trained=self._trained)
      self._open = False
