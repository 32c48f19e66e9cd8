# ``python -m experiments.convert``: the same program as ``python -m sbjax.cli.convert``, kept for existing
# command lines (the console scripts point at sbjax.cli). Its --help prints the tool's docstring.
from sbjax.cli.convert import __doc__, cli  # noqa: F401

if __name__ == "__main__":
  cli()
