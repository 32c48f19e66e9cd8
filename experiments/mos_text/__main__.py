"""``python -m experiments.mos_text --preset=cpu --out=out/mos_text [--data=DIR]``."""

import json
import logging
import sys


from sbjax.cli import common
from . import PRESETS, comparisons, run
from .report import CSV
from ..shared import locks_out, main_flags, read_rows, upath

OUT, PRESET, DATA = main_flags("mos_text", PRESETS)


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value or None)
  c = comparisons(read_rows(out / CSV))
  common.result(json.dumps({"out": str(out), **{k: (v["verdict"] if v else None)
                                                for k, v in c.items()}}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
