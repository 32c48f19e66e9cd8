"""The data-source registry: one ``DataSource`` per value of ``data.source``.

The built-in sources (``text``, ``tfds``, ``tokens`` and the planted languages ``planted``,
``planted_mix``, ``planted_mos``) are registered here; their ``build`` is ``build_planted``,
``build_text`` or ``build_tokens`` of ``sbjax.data.dataset``, which read the flat
``DataConfig`` fields they have always read. ``make_dataset`` calls the source's ``build``.
A new source is one new file: a ``DataSource`` subclass with its own fields in a frozen
``SourceOptions`` dataclass (``DataConfig.options``, JSON ``"options": {field: value}``) and a
``build(cfg, **batching)`` returning a ``sbjax.data.Dataset``, registered with
``register(Source())`` at import; ``DataConfig(source=NAME, options=...)`` then validates and
``sbjax.train.train`` trains on it. A source module must not import ``sbjax.config`` (it is
imported by it, like ``sbjax.heads.base``).

Still to do (issue 30): the built-in sources keep their fields flat in ``DataConfig`` (11
``planted_*``, ``tokens_*``, ``tfds_*``; a ``DataConfig`` migration like the heads' legacy
loader is needed to type them), and ``data.source`` is still compared by name in
``sbjax.sweep``, ``sbjax.analysis.data_source``, ``sbjax.data.builders`` and the planted /
text builders themselves.

This module is plain Python (no jax import), so ``sbjax.config`` can validate with it.
"""

from __future__ import annotations

import dataclasses
import importlib
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
  """Base of the data sources: ``build(cfg, *, workdir, seq_len, global_batch_size, seed,
  process_index, process_count)`` returns the ``Dataset`` of a ``DataConfig`` (what
  ``make_dataset`` calls)."""

  name: str = ""
  options: type = SourceOptions
  # the exact next-token distributions are known (train.objective=expected is allowed)
  planted: bool = False

  def build(self, cfg, **batching):
    raise NotImplementedError(f"data source {self.name!r} defines no build")

  def validate(self, cfg) -> None:
    """Checks of the ``DataConfig`` fields this source reads (ValueError naming the field)."""
    return None


class _Builtin(DataSource):
  """A built-in source: its build is ``sbjax.data.dataset.<builder>``, imported on first use
  (this module stays free of jax and numpy)."""

  def __init__(self, name: str, builder: str, planted: bool = False, needs: tuple = ()):
    self.name, self.planted, self._builder, self._needs = name, planted, builder, needs

  def build(self, cfg, **batching):
    return getattr(importlib.import_module("sbjax.data.dataset"), self._builder)(cfg, **batching)

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
    if type(spec) is not cls:  # another source's options (pass options=None with a new source)
      raise config_error("data.options", spec, f"the options of data.source={name} "
                         f"({cls.__name__}), or None for its defaults")
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


for _s in (_Builtin("planted", "build_planted", planted=True),
           _Builtin("planted_mix", "build_planted", planted=True),
           _Builtin("planted_mos", "build_planted", planted=True),
           _Builtin("text", "build_text", needs=(("path", "a directory of .txt files"),)),
           _Builtin("tfds", "build_text", needs=(("tfds_name", "a TFDS dataset name"),)),
           _Builtin("tokens", "build_tokens", needs=(("tokens_path", "an integer .npy [n, T+1] "
                                                                     "or a flat token .bin"),))):
  register(_s)
_BUILTIN_NAMES = frozenset(_SOURCES)
