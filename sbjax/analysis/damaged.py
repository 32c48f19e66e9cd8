"""Damaged checkpoints met by an analysis: named, set aside as training sets them aside, skipped.

A step whose params fail to read (a file that fails its checksum, a truncated or deleted
array file, a half-written directory) is moved to ``WORKDIR/checkpoints_bad/`` with
``sbjax.checkpoint.move_aside`` (never deleted; the same place and the same warning line
as a resumed training run: ``checkpoint step N in W is bad (reason); moved it aside to D``),
or, when the workdir is read-only, left in place and skipped with a warning saying so. The
other steps are analysed; ``metrics.json`` lists the damaged ones under ``set_aside``. The
analysis fails only when no step is left.

The CKA reference (the final step) is read before anything else (``settle_reference``): a
damaged final step is set aside and the newest good step becomes the reference.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sbjax import checkpoint as ckpt

log = logging.getLogger("sbjax")


class Damaged:
  """The damaged steps of one analysis: ``{step: {"step", "reason", "moved_to"}}``."""

  def __init__(self, workdir):
    self.workdir, self.steps = workdir, {}

  def set_aside(self, step: int, err: BaseException) -> None:
    reason = f"{type(err).__name__}: {err}"
    try:
      moved_to = str(ckpt.move_aside(self.workdir, step, reason))
    except OSError as e:  # a read-only workdir: skip the step, leave it in place
      moved_to = None
      log.warning("checkpoint step %d in %s is bad (%s); could not move it aside (%s): "
                  "skipped, not analysed", step, self.workdir, reason, e.strerror or e)
    self.steps[step] = {"step": step, "reason": reason, "moved_to": moved_to}

  def records(self) -> list[dict]:
    return [self.steps[s] for s in sorted(self.steps)]

  def none_left(self) -> Exception:
    """The error when every step asked for was damaged."""
    return ckpt.CorruptCheckpointError(
        f"no checkpoint of {self.workdir} could be analysed: step(s) {sorted(self.steps)} are "
        f"damaged (set aside to {Path(self.workdir) / 'checkpoints_bad'}; the first: "
        f"{self.records()[0]['reason'] if self.steps else '?'}); nothing was written. Restore "
        "good copies of the checkpoints, or analyse another run")


def read_good(reader, steps, damaged: Damaged) -> tuple[list, list]:
  """(params, steps) of the ``steps`` that read; the others are set aside."""
  plist, good = [], []
  for s in steps:
    try:
      plist.append(reader.read([s])[0])
      good.append(s)
    except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
      damaged.set_aside(s, e)
  return plist, good


def settle_reference(workdir, abstract, candidates: list, damaged: Damaged) -> int | None:
  """The newest of ``candidates`` (ascending steps) whose params read; newer damaged ones
  are set aside. None when none reads."""
  with ckpt.ParamsReader(workdir, abstract) as reader:
    for s in reversed(candidates):
      if read_good(reader, [s], damaged)[1]:
        return s
  return None
