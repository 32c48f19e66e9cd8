# ``python -m experiments.convert`` = ``python -m sbjax.cli.convert`` (its --help: the tool's docstring)
from sbjax.cli.convert import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
