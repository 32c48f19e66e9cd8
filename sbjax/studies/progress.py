"""An experiment's progress over many runs: ``RunsProgress`` (run i of n, total ETA, through
``sbjax.progress.Reporter``) and ``SweepProgress``, the ``progress``
callback of ``sbjax.studies.rank_sweep.run_plan`` that drives it."""

from __future__ import annotations

import time

from sbjax.progress import Reporter


class RunsProgress:
  """An experiment's overall progress: run i of n with the total ETA (a bar on a terminal,
  plain log lines otherwise: ``sbjax.progress.Reporter``). The ETA is the mean time of the
  runs that trained so far times the runs left (runs read back as finished do not count
  towards the rate)."""

  def __init__(self, n: int, name: str, disable: bool = False):
    self.n, self.name, self.done, self.timed, self.seconds = n, name, 0, 0, 0.0
    self._t = None
    self.report = Reporter(name, n, "run", enabled=not disable)

  def start(self, label: str) -> None:
    self._t = time.perf_counter()
    self.report.bar.set_postfix_str(label, refresh=self.report.tty)
    self.report.line(f"run {self.done + 1}/{self.n}: {label}")

  def finish(self, trained: bool = True) -> None:
    if self._t is not None and trained:
      self.seconds += time.perf_counter() - self._t
      self.timed += 1
    self._t = None
    self.done += 1
    self.report.advance(1)
    if self.timed:
      eta = self.seconds / self.timed * (self.n - self.done)
      self.report.line(f"{self.done}/{self.n} runs done, ETA {eta:.0f} s")

  def close(self) -> None:
    self.report.close()


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
