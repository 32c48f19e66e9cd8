# ``python -m experiments.analyze`` = ``python -m sbjax.cli.analyze`` (its --help: the tool's docstring)
from sbjax.cli.analyze import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
