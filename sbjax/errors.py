"""The one config-error helper of sbjax: every invalid setting is reported the same way,

    invalid config: model.head.rank=0; allowed: an integer in [1, min(V, d)]

naming the field, the value given and what is allowed, in one line (no traceback needed to
find the fix). ``what`` names the kind of setting when it is not a ``Config`` field
(``analysis setting``, ``convergence setting``). Messages name config fields as ``Config``
spells them (``train.lr``), whatever command was called.
"""

from __future__ import annotations

from typing import Any


def config_error(field: str, value: Any, allowed: str, what: str = "config") -> ValueError:
  return ValueError(f"invalid {what}: {field}={value!r}; allowed: {allowed}")
