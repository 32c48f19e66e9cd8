"""The data-source registry: one ``DataSource`` per value of ``data.source``.

The built-in sources (``text``, ``tfds``, ``tokens`` and the planted languages ``planted``,
``planted_mix``, ``planted_mos``) are registered here and built by
``sbjax.data.dataset.make_dataset`` from the flat ``DataConfig`` fields they have always
read. A new source is one new file: a ``DataSource`` subclass with its own fields in a frozen
``SourceOptions`` dataclass (``DataConfig.options``, JSON ``"options": {field: value}``) and a
``build(cfg, **batching)`` returning a ``sbjax.data.Dataset``, registered with
``register(Source())`` at import; ``DataConfig(source=NAME, options=...)`` then validates and
``sbjax.train.train`` trains on it. A source module must not import ``sbjax.config`` (it is
imported by it, like ``sbjax.heads.base``).

Still to do (issue 30): the built-in sources keep their fields flat in ``DataConfig`` (11
``planted_*``, ``tokens_*``, ``tfds_*``) and the ``data.source`` switches in ``make_dataset``,
``sbjax.sweep``, ``sbjax.analysis.data_source`` and ``sbjax.data.builders``; moving each into
its own options and ``build`` is the next step.

This module is plain Python (no jax import), so ``sbjax.config`` can validate with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from sbjax.errors import config_error


@dataclasses.dataclass(frozen=True)
class SourceOptions:
  """Base of the sources' own fields (none here); a subclass is a frozen dataclass that
  sets ``source`` and checks its fields alone in ``check`` (``config_error("data.options.F",
  ...)``)."""

  source: ClassVar[str] = ""

  def __post_init__(self):
    self.check()

  def check(self) -> None:
    return None

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


class DataSource:
  """Base of the data sources. ``build(cfg, *, seq_len, global_batch_size, seed, workdir,
  process_index, process_count)`` returns the ``Dataset`` of a ``DataConfig``; None means
  ``make_dataset`` builds it (the built-ins)."""

  name: str = ""
  options: type = SourceOptions
  # the exact next-token distributions are known (train.objective=expected is allowed)
  planted: bool = False
  build = None

  def validate(self, cfg) -> None:
    """Checks of the ``DataConfig`` fields this source reads (ValueError naming the field)."""
    return None


class _Builtin(DataSource):
  def __init__(self, name: str, planted: bool = False, needs: tuple = ()):
    self.name, self.planted, self._needs = name, planted, needs

  def validate(self, cfg) -> None:
    for field, what in self._needs:
      if not getattr(cfg, field):
        raise config_error(f"data.{field}", getattr(cfg, field),
                           f"{what} when data.source={self.name}")


_SOURCES: dict[str, DataSource] = {}


def register(source: DataSource) -> DataSource:
  """Add a source (a module-level call in its file); re-registering a name replaces it."""
  if not source.name or source.options.source not in ("", source.name):
    raise ValueError(f"data source {source!r} needs a name, and its options class the same "
                     f"source name (got {source.options.source!r})")
  _SOURCES[source.name] = source
  return source


def unregister(name: str) -> None:
  if name in _BUILTIN_NAMES:
    raise ValueError(f"data source {name!r} is built in and cannot be unregistered")
  _SOURCES.pop(name, None)


def names() -> tuple[str, ...]:
  return tuple(_SOURCES)


def planted_names() -> tuple[str, ...]:
  """The sources whose exact next-token distributions are known."""
  return tuple(n for n, s in _SOURCES.items() if s.planted)


def get(name: str) -> DataSource:
  if name not in _SOURCES:
    raise config_error("data.source", name, " | ".join(_SOURCES))
  return _SOURCES[name]


def options_for(name: str, spec: Any) -> SourceOptions:
  """The typed options of source ``name`` from None (its defaults), a dict or an instance."""
  cls = get(name).options
  if isinstance(spec, SourceOptions):
    if not isinstance(spec, cls):
      raise config_error("data.options", spec, f"the options of data.source={name} "
                         f"({cls.__name__})")
    return spec
  spec = {} if spec is None else spec
  if not isinstance(spec, dict):
    raise config_error("data.options", spec, f"a dict of the fields of data.source={name}")
  known = [f.name for f in dataclasses.fields(cls)]
  unknown = sorted(set(spec) - set(known))
  if unknown:
    raise config_error(f"data.options.{unknown[0]}", spec[unknown[0]],
                       f"the fields of data.source={name}: {' | '.join(known) or 'none'}")
  return cls(**spec)


for _s in (_Builtin("planted", planted=True), _Builtin("planted_mix", planted=True),
           _Builtin("planted_mos", planted=True),
           _Builtin("text", needs=(("path", "a directory of .txt files"),)),
           _Builtin("tfds", needs=(("tfds_name", "a TFDS dataset name"),)),
           _Builtin("tokens", needs=(("tokens_path", "an integer .npy [n, T+1] or a flat "
                                                     "token .bin"),))):
  register(_s)
_BUILTIN_NAMES = frozenset(_SOURCES)
