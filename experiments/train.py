r"""Train (or resume) one sbjax run.

  python -m experiments.train --config=tiny --workdir=runs/tiny --config.train.steps=50

``--config`` is a preset name (see sbjax/presets.py), a JSON file, or an
ml_collections .py file; ``--config.section.key=value`` overrides any field.
Rerunning the same command on an existing workdir continues from its latest
checkpoint. WORKDIR receives config.json, metrics.jsonl, checkpoints/ and the
tokenizer where one was trained.
"""

from __future__ import annotations

import json
import logging
import sys

from absl import app, flags

from experiments import common
from sbjax import presets

CONFIG = presets.DEFINE_config("config", default="tiny")
WORKDIR = flags.DEFINE_string("workdir", None, "run directory (created if missing)", required=True)
STOP_AFTER = flags.DEFINE_integer("stop_after", None, "stop at this step (the run can be resumed)")
common.define_distributed_flags()


def main(argv):
  del argv
  common.maybe_initialize_distributed()
  from sbjax import train as train_lib  # after jax.distributed.initialize

  cfg = presets.build(CONFIG.value)
  summary = train_lib.train(cfg, WORKDIR.value, stop_after=STOP_AFTER.value)
  print(json.dumps(summary))


if __name__ == "__main__":
  logging.basicConfig(level=logging.INFO, stream=sys.stderr)
  common.run(main)
