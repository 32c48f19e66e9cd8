"""``python -m experiments.werror_loss --preset=cpu --out=out/werror_loss
[--head_rank_dir=out/head_rank] [--data=DIR]``."""

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from . import PRESETS, run
from .report import CSV, FIGURE, SUMMARY
from ..shared import locks_out, main_flags, upath

OUT, PRESET, DATA = main_flags("werror_loss", PRESETS,
                               "corpus for the head-rank sweep if it has to be run",
                               preset_help="preset of the head-rank sweep, if it has to be run")
HR_DIR = flags.DEFINE_string("head_rank_dir", "", "the head_rank output (default OUT/../head_rank)")


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value, head_rank_dir_=HR_DIR.value)  # holds the sweep's lock
  common.result(json.dumps({"out": str(out), "csv": str(out / CSV), "figure": str(out / FIGURE),
                            "summary": json.loads((out / SUMMARY).read_text())}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
