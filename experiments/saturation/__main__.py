"""python -m experiments.saturation --preset=test|quick|cpu|tpu --out=DIR [--data=DIR]
python -m experiments.saturation --preset=test-planted|cpu-planted|tpu-planted --out=DIR
python -m experiments.saturation --series=WORKDIR --tokens=FILE --out=DIR  (series.py)"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from absl import flags

from sbjax.cli import common, series_flags as sf
from .planted_presets import PLANTED_PRESETS
from .planted_report import write_section as write_planted_section
from .planted_run import run_planted
from .presets import PRESETS
from .report import report_section
from .run import run
from .series import run_series, series_section
from ..shared import SAMPLE_TEXT_HELP, locks_out, main_flags, upath

OUT, PRESET, DATA = main_flags("saturation", list(PRESETS) + list(PLANTED_PRESETS),
                               SAMPLE_TEXT_HELP + ", or a TFDS name for the tpu preset")
ANISO_TOK = flags.DEFINE_integer("anisotropy_tokens", 4096, "series: token positions sampled "
                                 "for anisotropy; 0 = all")


def main_series(out: Path) -> None:
  run_series(sf.SERIES.value, out, sf.TOKENS.value, sf.DATA.value, sf.steps(),
             sf.ALLOW_DUP.value, sf.eval_sequences(), ANISO_TOK.value)
  (out / "section.md").write_text(series_section(out, "."))
  common.result(json.dumps({"out": str(out), "series": str(out / "saturation_series.csv"),
                            "section": str(out / "section.md")}))


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  out = upath(OUT.value)
  if sf.SERIES.value:
    return main_series(out)
  if PRESET.value in PLANTED_PRESETS:  # the planted arms (width x Γ)
    run_planted(out, PRESET.value)
    common.result(json.dumps({"out": str(out), "arms": str(out / "planted_arms.csv"),
                              "section": str(write_planted_section(out))}))
    return
  run(out, PRESET.value, data=DATA.value or None)
  (out / "section.md").write_text(report_section(out, "."))
  common.result(json.dumps({"out": str(out), "runs": str(out / "saturation_runs.csv"),
                            "fit": str(out / "saturation_fit.csv"),
                            "section": str(out / "section.md")}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  sys.argv = sf.data_dot_flags(sys.argv)
  common.run_script(main, __name__)  # stdout: the result only
