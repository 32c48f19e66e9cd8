"""``python -m experiments.werror_loss --preset=cpu --out=out/werror_loss
[--head_rank_dir=out/head_rank] [--data=DIR]``."""

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from . import PRESETS, run
from .report import CSV, FIGURE, SUMMARY
from ..shared import upath

PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS),
                           "preset of the head-rank sweep, if it has to be run")
OUT = flags.DEFINE_string("out", "out/werror_loss", "output directory")
HR_DIR = flags.DEFINE_string("head_rank_dir", "", "the head_rank output (default OUT/../head_rank)")
DATA = flags.DEFINE_string("data", "", "corpus for the head-rank sweep if it has to be run")


def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value, head_rank_dir_=HR_DIR.value)
  common.result(json.dumps({"out": str(out), "csv": str(out / CSV), "figure": str(out / FIGURE),
                            "summary": json.loads((out / SUMMARY).read_text())}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
