r"""The one command line of the experiments (the registry is the caller's)::

  python -m experiments.reproduce --out=out --quick             # the main job
  python -m experiments.reproduce --out=out --preset=test       # every experiment, minutes
  python -m experiments.reproduce --out=out --only=a,b --preset=cpu --budget_s=3600
  python -m experiments.NAME --out=out/NAME --preset=cpu        # one experiment, in OUT itself

``--budget_s``: training stops cleanly at the first step boundary past the budget, saves that
step and exits with status 75; the same command again resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
import time

from absl import flags

from sbjax.cli import common
from sbjax.experiment import figure, runner, suite
from sbjax.paths import upath
from sbjax.train import preempt

PRESETS = ("test", "quick", "cpu", "tpu")


def _define(registry: dict, single: str | None):
  # registered as the main module's own flags, so that --help lists them under a console script
  main = {"module_name": sys.argv[0]}
  flags.DEFINE_string("out", f"out/{single}" if single else "out",
                      "output folder (local, or gs://bucket/dir)", **main)
  flags.DEFINE_string("preset", "cpu", f"the size: {', '.join(PRESETS)} (or an experiment's own)", **main)
  flags.DEFINE_string("data", "", "a directory of .txt files for the text experiments "
                      "(default: the sample corpus shipped in sbjax/data/sample_text)", **main)
  flags.DEFINE_float("budget_s", 0, "stop training cleanly after this many seconds (exit 75; "
                     "rerun to resume); 0: no budget", lower_bound=0, **main)
  flags.DEFINE_enum("fig_format", "png", list(figure.FORMATS), "format of the figures", **main)
  flags.register_validator("out", lambda v: not upath(v).exists() or upath(v).is_dir(),
                           "--out names a file; give a folder (new or an earlier output)")
  flags.register_validator("data", lambda v: not v or upath(v).is_dir(),
                           "--data is not a folder; give a folder of UTF-8 .txt files")
  if single is None:
    flags.DEFINE_bool("quick", False, "the README's main job: the quick preset of the quick "
                      "experiments unless --only is given", **main)
    flags.DEFINE_list("only", [], "experiments to run; known: " + ", ".join(registry), **main)


def _main(registry: dict, quick_default: tuple, single: str | None):
  def main(argv):
    del argv
    f = flags.FLAGS
    figure.set_format(f.fig_format)
    if f.budget_s:
      preempt.set_deadline(time.time() + f.budget_s)
    if single is not None:
      exp = suite.load(registry, single)
      ctx = runner.run(exp, upath(f.out), f.preset, f.data if exp.reads_data else None)
      common.result(json.dumps({"out": str(ctx.out), "preset": ctx.preset_name}))
      return
    preset = "quick" if f.quick else f.preset
    names = list(f.only) or (list(quick_default) if f.quick else list(registry))
    timings = suite.run_suite(registry, names, upath(f.out), preset, f.data)
    failed = [n for n, t in timings.items() if t["status"] != "ok"]
    common.result(json.dumps({"report": str(upath(f.out) / "report.md"), "failed": failed}))
    if failed:
      raise RuntimeError("experiment(s) failed: " + "; ".join(
          f"{n}: {timings[n]['error']}" for n in failed))

  return main


def main(registry: dict, quick_default: tuple = (), single: str | None = None) -> None:
  """Define the flags and run (``single``: one experiment straight into ``--out``)."""
  _define(registry, single)
  common.run_script(_main(registry, tuple(quick_default), single), __name__)
