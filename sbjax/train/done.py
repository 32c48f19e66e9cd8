"""The one "already trained?" rule: a run is finished when ``WORKDIR/DONE`` exists.

``DONE`` is written (atomically) after a run reached its last step with a final evaluation;
it holds the run's summary and config. Finished runs are read back, never retrained; a
run with checkpoints short of its steps is resumed by training it again.
"""

from __future__ import annotations

import json
from sbjax.atomic import atomic_write_text
from sbjax.paths import upath

DONE = "DONE"
SUMMARY_KEYS = ("step", "eval_loss", "eval_acc", "n_params", "loss")


def finished(workdir) -> dict | None:
  """The summary of a finished run in ``workdir``, or None if it is not finished."""
  try:
    return json.loads((upath(workdir) / DONE).read_text())["summary"]
  except (OSError, ValueError, KeyError, TypeError):
    return None


def mark_finished(workdir, summary: dict, config: dict) -> dict:
  """Write ``WORKDIR/DONE`` with the summary's main keys and the config; returns them."""
  keep = {k: summary[k] for k in SUMMARY_KEYS if k in summary}
  atomic_write_text(upath(workdir) / DONE,
                    json.dumps({"summary": keep, "config": config}, indent=1, default=float))
  return keep
