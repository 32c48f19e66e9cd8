# ``python -m experiments.train`` = ``python -m sbjax.cli.train`` (its --help: the tool's docstring)
from sbjax.cli.train import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
