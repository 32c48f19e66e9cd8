"""python -m experiments.collapse --preset=test|quick|cpu|tpu --out=DIR [--data=DIR]"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from absl import flags

from experiments import common
from experiments.collapse.presets import PRESETS
from experiments.collapse.report import report_section
from experiments.collapse.run import run

PRESET = flags.DEFINE_string("preset", "cpu", " | ".join(PRESETS))
OUT = flags.DEFINE_string("out", "out/collapse", "output directory")
DATA = flags.DEFINE_string("data", None, "a directory of .txt files (text presets; default: "
                           "the development corpus ../shared/data/shakespeare) or a TFDS name "
                           "(tpu preset)")


def main(argv):
  del argv
  out = Path(OUT.value)
  run(out, PRESET.value, DATA.value)
  section = report_section(out, ".")
  (out / "section.md").write_text(section)
  print(section)


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  common.run(main)
