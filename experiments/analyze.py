# ``python -m experiments.analyze``: the same program as ``python -m sbjax.cli.analyze``, kept for existing
# command lines (the console scripts point at sbjax.cli). Its --help prints the tool's docstring.
from sbjax.cli.analyze import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
