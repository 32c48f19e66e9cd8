r"""The paper experiments' registry and ``python -m experiments.reproduce`` (the console script
``sbjax-reproduce``): ``python -m experiments.reproduce --out=DIR [--quick] [--only=a,b]
[--preset=test|quick|cpu|tpu] [--data=DIR]``. The runner is ``sbjax.cli.reproduce.Suite``."""

from __future__ import annotations

from sbjax.cli.reproduce import PRESETS, Suite

# experiment name -> module (``experiments.X`` in a checkout, ``sbjax_experiments.X`` in a
# wheel), in report order; saturation_planted = the saturation experiment's planted arms
# (width x Γ on the planted mixture language); mos_text = MoS against dense and the
# parameter-matched lowrank head on text
_MODULES = (("planted", "planted"), ("head_rank", "head_rank"), ("werror_loss", "werror_loss"),
            ("vocab_threshold", "vocab_threshold"), ("saturation", "saturation"),
            ("saturation_planted", "saturation.planted"), ("target_rank", "target_rank"),
            ("collapse", "collapse"), ("convergence", "convergence"), ("mos_text", "mos_text"))
EXPERIMENTS = {name: f"{__package__}.{mod}" for name, mod in _MODULES}
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
