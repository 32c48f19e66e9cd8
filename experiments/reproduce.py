r"""The paper experiments' registry and their one command line (``sbjax-reproduce``)::

  python -m experiments.reproduce --out=out --quick [--only=a,b] [--preset=test|quick|cpu|tpu]
  python -m experiments.NAME --out=out/NAME --preset=cpu     # one experiment, in OUT itself

``--help`` lists the flags (``sbjax.cli.experiment``)."""

from __future__ import annotations

from sbjax.cli import experiment as cli

# experiment name -> module holding its EXPERIMENT, in report order
_MODULES = (("planted", "planted"), ("head_rank", "head_rank"), ("werror_loss", "werror_loss"),
            ("vocab_threshold", "vocab_threshold"), ("saturation", "saturation"),
            ("saturation_planted", "saturation.planted"), ("target_rank", "target_rank"),
            ("collapse", "collapse"), ("convergence", "convergence"), ("mos_text", "mos_text"))
REGISTRY = {name: f"{__package__}.{mod}" for name, mod in _MODULES}
QUICK = ("planted",)


def main(single: str | None = None) -> None:
  """The command line of the registry (``single``: one experiment straight into ``--out``)."""
  cli.main(REGISTRY, QUICK, single)


def cli_main():
  """The ``sbjax-reproduce`` console script."""
  main()


if __name__ == "__main__":
  main()
