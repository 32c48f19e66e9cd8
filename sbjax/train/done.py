"""The one "already trained?" rule: a run is finished when ``WORKDIR/DONE`` exists.

``DONE`` (written atomically after the last step and its evaluation) holds the run's summary
and config. Finished runs are read back, never retrained; a finished run asked for with
another config is refused in one line (``check_same``): only settings that change no number
may differ.
"""

from __future__ import annotations

import json

from sbjax.atomic import atomic_write_text
from sbjax.config import Config
from sbjax.paths import upath
from sbjax.train.workdir import config_diff

DONE = "DONE"
SUMMARY_KEYS = ("step", "eval_loss", "eval_acc", "n_params", "loss")


def finished(workdir) -> dict | None:
  """The summary of a finished run in ``workdir``, or None if it is not finished."""
  try:
    return json.loads((upath(workdir) / DONE).read_text())["summary"]
  except (OSError, ValueError, KeyError, TypeError):
    return None


# settings that change no number of a finished run (kernels, logging, the mesh, its name)
SAME_RESULTS = {"name", "mesh", "model.loss_chunk", "model.attn_impl", "train.log_every",
                "train.async_checkpoint"}


def check_same(workdir, config: dict) -> None:
  """Refuse a finished run whose DONE config differs from ``config`` in a setting that changes
  its numbers (``model.vocab_size`` 0 means "from the data" and matches any)."""
  saved = json.loads((upath(workdir) / DONE).read_text()).get("config")
  if saved is None:
    return
  saved = Config.from_dict(saved).to_dict()
  if config["model"]["vocab_size"] == 0:  # "from the data": matches any
    config = {**config, "model": {**config["model"], "vocab_size": saved["model"]["vocab_size"]}}
  diff, _ = config_diff(saved, config, SAME_RESULTS)
  if diff:
    raise ValueError(f"{workdir} holds a finished run of another configuration ({'; '.join(diff)});"
                     " use another output folder, or delete its DONE to train it again")


def mark_finished(workdir, summary: dict, config: dict) -> dict:
  """Write ``WORKDIR/DONE`` with the summary's main keys and the config; returns them."""
  keep = {k: summary[k] for k in SUMMARY_KEYS if k in summary}
  atomic_write_text(upath(workdir) / DONE,
                    json.dumps({"summary": keep, "config": config}, indent=1, default=float))
  return keep
