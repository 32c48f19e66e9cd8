r"""The paper experiments' registry and ``python -m experiments.reproduce`` (the console script
``sbjax-reproduce``): ``python -m experiments.reproduce --out=DIR [--quick] [--only=a,b]
[--preset=test|quick|cpu|tpu] [--data=DIR]``. The runner is ``sbjax.cli.reproduce.Suite``."""

from __future__ import annotations

from sbjax.cli.reproduce import PRESETS, Suite

# experiment name -> module (``experiments.NAME`` in a checkout, ``sbjax_experiments.NAME`` in
# a wheel), in report order
EXPERIMENTS = {name: f"{__package__}.{name}" for name in (
    "planted", "head_rank", "werror_loss", "vocab_threshold", "saturation", "target_rank",
    "collapse", "convergence")}
QUICK_DEFAULT = ("planted",)
SUITE = Suite(EXPERIMENTS, QUICK_DEFAULT)
select, load, run_all, write_report = SUITE.select, SUITE.load, SUITE.run_all, SUITE.write_report
__all__ = ["EXPERIMENTS", "PRESETS", "QUICK_DEFAULT", "SUITE", "cli", "load", "run_all",
           "select", "write_report"]


def cli():
  """The ``sbjax-reproduce`` console script (and ``python -m experiments.reproduce``)."""
  SUITE.cli()


if __name__ == "__main__":
  cli()
