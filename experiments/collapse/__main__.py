"""python -m experiments.collapse --preset=test|quick|cpu|tpu|gpu|gpu-grid --out=DIR [--data=DIR]
(gpu, gpu-grid: --data=TRAIN.uint16.bin,VAL.uint16.bin of benchmarks/build_device_tokens.py)
python -m experiments.collapse --series=WORKDIR --tokens=FILE --out=DIR  (series.py)"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from absl import flags

from sbjax.cli import common, series_flags as sf
from sbjax.cli.number_flags import define_number_list
from .budget import OverBudget
from .presets import PRESETS
from .report import write_section
from .run import run
from .series import run_series, series_section
from ..shared import locks_out, upath

PRESET = flags.DEFINE_string("preset", "cpu", " | ".join(PRESETS))
OUT = flags.DEFINE_string("out", "out/collapse", "output directory")
DATA = flags.DEFINE_string("data", None, "a directory of .txt files (text presets; default: "
                           "the sample corpus shipped in sbjax/data/sample_text), token files "
                           "TRAIN.bin[,VAL.bin] or .npy (tpu preset: TinyStories ids of the "
                           "GPT-Neo tokenizer), or a TFDS name (a tfds preset)")
COLL_SEQ = flags.DEFINE_integer("collapse_sequences", 64, "series: train-split windows for the "
                                "class means / variances")
MIN_COUNTS = define_number_list("min_counts", [1], "series: analysed classes have N_c >= "
                                       "each", example="1,5,20")


def main_series(out: Path) -> None:
  run_series(sf.SERIES.value, out, sf.TOKENS.value, sf.DATA.value, sf.steps(),
             sf.ALLOW_DUP.value, COLL_SEQ.value, sf.eval_sequences(),
             tuple(MIN_COUNTS.value))
  section = series_section(out)
  (out / "section.md").write_text(section)
  common.result(section)


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  if sf.SERIES.value:
    return main_series(out)
  try:
    run(out, PRESET.value, data=DATA.value)
  except OverBudget as e:  # a clean stop: finished groups are kept, a rerun resumes
    print(f"stopped: {e}", file=sys.stderr)
    write_section(out)  # the report of the groups that finished (it names the stop)
    sys.exit(75)
  common.result(write_section(out).read_text())


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  sys.argv = sf.data_dot_flags(sys.argv)
  common.run_script(main, __name__)  # stdout: the result only
