"""Notes of sbjax's dependencies that say nothing a user can act on, dropped from the log:
orbax's on every read-only ``CheckpointManager`` (sbjax opens one for each restore) and TFDS's
"Using custom data configuration". ``install()`` (run by the command-line entry points,
``sbjax.cli.common``; importing sbjax configures no logging) adds the filter to absl's logger,
through which both log; their other warnings stay.
"""

from __future__ import annotations

from absl import logging as absl_logging

NOISE = ("Given directory is read only", "setting save_interval_steps=0",
         "Using custom data configuration")


def drop_expected_notes(record) -> bool:
  """A logging filter: False for a record whose message holds one of ``NOISE``."""
  msg = record.getMessage()
  return not any(n in msg for n in NOISE)


def install() -> None:
  """Add the filter to absl's logger once."""
  logger = absl_logging.get_absl_logger()
  if drop_expected_notes not in logger.filters:
    logger.addFilter(drop_expected_notes)
