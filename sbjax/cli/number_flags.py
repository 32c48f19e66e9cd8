"""``define_number_list``: an absl list flag of numbers, typed when the command line is parsed,
so a bad item is one line before anything runs: ``flag --w_error_dims=16,abc: 'abc' is not an
integer; expected a comma-separated list of integers, e.g. 16,64``. The flags defined through
it belong to the calling module (``flags.disclaim_key_flags``)."""

from __future__ import annotations

from absl import flags


class NumberListParser(flags.ListParser):
  """A comma-separated list of ``kind`` (int or float); ``example`` shows the form."""

  def __init__(self, kind: type, example: str):
    super().__init__()
    self.kind, self.example = kind, example
    self.what = "an integer" if kind is int else "a number"
    self.syntactic_help = f"a comma separated list of {self.what.split()[-1]}s"  # --help

  def parse(self, argument):
    out = []
    for item in super().parse(argument):
      try:
        out.append(self.kind(item))
      except (TypeError, ValueError):
        raise ValueError(f"{item!r} is not {self.what}; expected a comma-separated list of "
                         f"{self.what.split()[-1]}s, e.g. {self.example}") from None
    return out

  def flag_type(self) -> str:
    return f"comma separated list of {self.what.split()[-1]}s"


def define_number_list(name: str, default, help_string: str, kind: type = int,
                       example: str = "1,2,3", flag_values=flags.FLAGS):
  """An absl list flag whose items are ``kind`` (int or float), checked at parse time;
  ``.value`` is a list of ``kind`` (None when the default is None)."""
  return flags.DEFINE(NumberListParser(kind, example), name, default, help_string,
                      flag_values, serializer=flags.CsvListSerializer(","))


flags.disclaim_key_flags()  # the flags defined here are their callers' (see the docstring)
