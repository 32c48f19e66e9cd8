"""python -m experiments.convergence --preset=test|quick|cpu|tpu --out=DIR [--data=DIR]
[--series=DIR,... --tokens=FILE.npy [--allow_duplicates]] [--widths=...] [measurement options]

``--series``: sbjax workdirs (an imported series, ``experiments.convert --from_hf``, or a
run) or directories of HF revisions, measured on the fixed batch ``--tokens`` (an .npy
[n, T+1]; ``--series_tokens`` is the older name) instead of training."""

from __future__ import annotations

import json
import logging
import sys

from absl import flags

from sbjax.cli import common
from sbjax.cli import data_flags as df
from sbjax.cli.number_flags import define_number_list
from .presets import PRESETS
from .report import report_section
from .run import run
from ..shared import locks_out, main_flags, upath

OUT, PRESET, DATA = main_flags("convergence", PRESETS, "a directory of .txt files for the text "
                               "presets ('' = the sample corpus shipped in sbjax/data/sample_text)",
                               preset_help="size preset")
SERIES = flags.DEFINE_list("series", [], "sbjax workdirs (an imported series: experiments."
                           "convert --from_hf, or a run) or HF series directories (step<N>/ "
                           "revisions) to measure instead of training; needs --tokens")
SERIES_TOKENS = flags.DEFINE_string("series_tokens", "", "the older name of --tokens")
TOKEN_MODES = flags.DEFINE_list("token_modes", ["last", "all"], "CKA token modes computed; the "
                                "first is the primary one (figure, table)")
ESTIMATORS = flags.DEFINE_list("estimators", ["biased", "debiased"], "CKA estimators computed; "
                               "the first is the primary one")
PER_MLP_R = flags.DEFINE_integer("per_mlp_r", 0, "PER of fc_out over the top r singular "
                                 "values; 0 = all (min(F, D))")
PER_OV_R = flags.DEFINE_integer("per_ov_r", 0, "PER of the OV matrices over the top r; "
                                "0 = head_dim (gradients: 2 head_dim)")
WIDTHS = define_number_list("widths", [], "a subset of the preset's widths (default: all)",
                                   example="64,128")
GRAD_PER = flags.DEFINE_enum("grad_per", "preset", ["preset", "on", "off"],
                             "PER of the gradients on the fixed batch")


def _series_tokens() -> str:
  """--tokens (or --series_tokens); the analysis-only data flags are refused, not ignored."""
  unused = [f for f, v in (("--steps", df.STEPS.value), ("--data.*", df.DATA.value),
                           ("--eval_sequences", df.EVAL_SEQ.value is not None)) if v]
  if unused:
    raise ValueError(f"{', '.join(unused)}: not used by convergence, which measures every "
                     "checkpoint of --series on the fixed batch --tokens=FILE.npy")
  a, b = df.TOKENS.value, SERIES_TOKENS.value
  if a and b and a != b:
    raise ValueError(f"--tokens={a} and --series_tokens={b} differ: give one")
  return a or b


@locks_out(OUT)  # one writer per --out folder
def main(argv):
  del argv
  grad = {"preset": None, "on": True, "off": False}[GRAD_PER.value]
  run(upath(OUT.value), PRESET.value, data=DATA.value, series=SERIES.value,
      series_tokens=_series_tokens(), allow_duplicates=df.ALLOW_DUP.value,
      widths=tuple(WIDTHS.value) or None,
      token_modes=tuple(TOKEN_MODES.value), estimators=tuple(ESTIMATORS.value),
      per_mlp_r=PER_MLP_R.value, per_ov_r=PER_OV_R.value, grad_per=grad)
  out = upath(OUT.value)
  (out / "section.md").write_text(report_section(out, "."))
  common.result(json.dumps({"out": str(out), "section": str(out / "section.md"),
                            **json.loads((out / "summary.json").read_text())}))


if __name__ == "__main__":
  logging.basicConfig(level=logging.INFO, stream=sys.stderr)
  common.run_script(main, __name__)  # stdout: the result only
