# ``python -m experiments.sweep`` = ``python -m sbjax.cli.sweep`` (its --help: the tool's docstring)
from sbjax.cli.sweep import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
