"""``python -m experiments.vocab_threshold --preset=cpu --out=out/vocab_threshold [--data=DIR]``."""

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from . import PRESETS, run
from .bigram_n_report import SUMMARY
from .report import FIT
from ..shared import locks_out, upath

PRESET = flags.DEFINE_enum("preset", "cpu", list(PRESETS), "experiment size")
OUT = flags.DEFINE_string("out", "out/vocab_threshold", "output directory")
DATA = flags.DEFINE_string("data", "", "directory of .txt files (default: the Shakespeare "
                           "sample corpus shipped in sbjax/data/sample_text); gpu presets: a "
                           "folder of V<V>/ token files (benchmarks/build_device_tokens.py)")


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  run(out, PRESET.value, data=DATA.value)
  if PRESETS[PRESET.value].knobs.bigram_n is not None:  # the bigram r*(V, N) study
    common.result(json.dumps({"out": str(out),
                              "bigram_n": json.loads((out / SUMMARY).read_text())}))
    return
  common.result(json.dumps({"out": str(out), "fit": json.loads((out / FIT).read_text())}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
