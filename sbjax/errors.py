"""The one config-error helper of sbjax: every invalid setting is reported the same way,

    invalid config: model.head.rank=0; allowed: an integer in [1, min(V, d)]

naming the field, the value given and what is allowed, in one line (no traceback needed to
find the fix). ``what`` names the kind of setting when it is not a ``Config`` field
(``analysis setting``, ``convergence setting``).

A message that says which setting to change names it as the command that was called spells
it (``option``: ``--data`` in an experiment, ``--config.data.options.path`` in train).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Mapping


def config_error(field: str, value: Any, allowed: str, what: str = "config") -> ValueError:
  return ValueError(f"invalid {what}: {field}={value!r}; allowed: {allowed}")


# ---------------------------------------------------------------- how a command spells a field
# A message deep in sbjax (an empty corpus, a vocabulary too large for it) says which setting
# to change. The command that was called knows how its users set it: ``--config.data.options.
# path`` for train, ``--data.path`` for analyze, ``--data`` for the experiments. The command
# says so (``option_names`` around its main, ``name_option`` where it turns a flag into a
# field); the message asks ``option(field)``. sbjax imports no command to know it.
_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("sbjax_option_names",
                                                                    default=None)


def option(field: str) -> str:
  """How the running command spells the config field ``field`` (``data.options.path``): the
  name it gave (``option_names``, ``name_option``), else the spelling of the longest section
  pattern that holds it (``"data.*": "--data."``: ``--data.source``; ``"*": "--config."``:
  every field), else the field itself (a library call, a config file)."""
  names = _NAMES.get() or {}
  if field in names:
    return names[field]
  for pattern in sorted((k for k in names if k.endswith("*")), key=len, reverse=True):
    section = pattern[:-1]
    if field.startswith(section):
      return names[pattern] + field[len(section):]
  return field


@contextlib.contextmanager
def option_names(names: Mapping[str, str] | None = None):
  """Within: ``option`` spells fields as ``names`` says (``{field: flag}``, and
  ``{"section.*": prefix}``: the fields of a section, ``"*"``: every other field, e.g.
  ``--config.``); ``name_option`` adds names."""
  token = _NAMES.set(dict(names or {}))
  try:
    yield
  finally:
    _NAMES.reset(token)


def name_option(field: str, flag: str) -> None:
  """Within ``option_names``: ``field`` is spelled ``flag`` from now on (a command that turned
  its flag into that field: the experiments' ``--data`` is ``data.options.path``); outside,
  nothing (a library call keeps the field names)."""
  names = _NAMES.get()
  if names is not None:
    names[field] = flag
