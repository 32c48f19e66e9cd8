"""``python -m experiments.target_rank --preset=cpu --out=out/target_rank [--data=DIR]``."""

import json
import logging
import sys


from sbjax.cli import common
from . import CSV, PRESETS, run
from ..shared import SAMPLE_TEXT_HELP, locks_out, main_flags, upath

OUT, PRESET, DATA = main_flags(
    "target_rank", PRESETS, SAMPLE_TEXT_HELP + ", or a TFDS name for the tpu preset")


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value or None)
  common.result(json.dumps({"out": str(out), "csv": str(out / CSV)}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
