"""``python -m experiments.planted --preset=cpu --out=out/planted``: runs both parts and prints
the knee and its checks as one JSON line."""

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from . import PRESETS, run, summarize
from sbjax.paths import upath
from ..shared import locks_out, main_flags

OUT, PRESET, _ = main_flags("planted", PRESETS, data_help=None)
PARTS = flags.DEFINE_list("parts", None, "knee,mix (part 1, part 2) or one of them; default: "
                          "the preset's (both, or part 2 alone for the *-mos-seeds presets)")


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, parts=tuple(PARTS.value) if PARTS.value else None)
  common.result(json.dumps({"out": str(out), **summarize(out)}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
