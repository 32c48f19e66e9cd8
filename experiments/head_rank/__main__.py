"""``python -m experiments.head_rank --preset=cpu --out=out/head_rank [--data=DIR]``."""

import json
import logging
import sys


from sbjax.cli import common
from . import PRESETS, run, summarize
from .report import FIGURE
from ..shared import locks_out, main_flags, upath

OUT, PRESET, DATA = main_flags(
    "head_rank", PRESETS, "directory of .txt files (default: the Shakespeare sample corpus "
    "shipped in sbjax/data/sample_text)", preset_help="experiment size")


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value)
  s = summarize(out)
  common.result(json.dumps({
      "out": str(out), "csv": str(out / "head_rank.csv"), "figure": str(out / FIGURE),
      "b_non_increasing_ranks": s.get("b", {}).get("n_non_increasing"),
      "check_b_non_increasing_6_ranks": s.get("check_b_non_increasing_6_ranks")}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
