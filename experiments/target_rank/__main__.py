"""``python -m experiments.target_rank --preset=cpu --out=out/target_rank [--data=DIR]``."""

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from . import CSV, PRESETS, run
from ..shared import upath

OUT = flags.DEFINE_string("out", "out/target_rank", "output directory")
PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS), " | ".join(PRESETS))
DATA = flags.DEFINE_string("data", "", "a directory of .txt files (default: the sample corpus "
                           "shipped in sbjax/data/sample_text), or a TFDS name for the tpu preset")


def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value or None)
  common.result(json.dumps({"out": str(out), "csv": str(out / CSV)}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
