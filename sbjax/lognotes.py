"""Notes of sbjax's dependencies that say nothing a user can act on, dropped from the log.

- orbax warns on every read-only ``CheckpointManager`` ("Given directory is read only",
  "setting save_interval_steps=0"), and sbjax opens one for each restore and analysis read;
- TFDS warns "Using custom data configuration" for every builder config made at run time,
  which every sbjax dataset is (planted, text, tokens).

``install()`` (run by the command-line entry points, ``sbjax.cli.common``; importing sbjax
configures no logging) adds the filter to absl's logger, through which both log; their other
warnings stay.
"""

from __future__ import annotations

import logging

from absl import logging as absl_logging

NOISE = ("Given directory is read only", "setting save_interval_steps=0",
         "Using custom data configuration")


class DropExpectedNotes(logging.Filter):
  """Drops a record whose message holds one of ``NOISE``."""

  def filter(self, record: logging.LogRecord) -> bool:
    msg = record.getMessage()
    return not any(n in msg for n in NOISE)


def install() -> None:
  """Add the filter to absl's logger once (absl's own, from absl.logging, not a plain logger
  of that name made here before absl)."""
  logger = absl_logging.get_absl_logger()
  if not any(isinstance(f, DropExpectedNotes) for f in logger.filters):
    logger.addFilter(DropExpectedNotes())
