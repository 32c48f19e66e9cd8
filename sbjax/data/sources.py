"""The data-source registry: one ``DataSource`` per value of ``data.source``.

A source says what it is (``planted``: its exact next-token distributions are known;
``synthetic``: generated from the config alone, no text; ``needs_tokenizer``: its tokens come
from a tokenizer, ``data.options.tokenizer``; ``shareable``: one dataset may serve several runs
of the same data config) and builds its ``Dataset``; nothing outside this registry compares
``data.source`` by name. Its fields are a frozen ``SourceOptions`` dataclass
(``sbjax.data.options``; ``DataConfig.options``, JSON ``"options": {field: value}``).

The built-in sources are registered here: ``planted``, ``planted_mix``, ``planted_mos``,
``planted_tail`` (the planted languages, built by ``build_planted`` from
``language(options)``), ``text``, ``tfds`` (``build_text_dir``, ``build_tfds``) and ``tokens``
(``build_tokens``), the builders of ``sbjax.data.dataset``. ``make_dataset`` calls the
source's ``build``. A new source is one new file: a ``DataSource`` subclass with its own
``SourceOptions`` dataclass and a ``build(cfg, **batching)`` returning a
``sbjax.data.Dataset``, registered with ``register(Source())`` at import;
``DataConfig(source=NAME, options=...)`` then validates and ``sbjax.train.train`` trains on
it. A source module must not import ``sbjax.config`` (it is imported by it, like
``sbjax.heads.base``).

This module is plain Python (no jax or numpy import), so ``sbjax.config`` can validate with
it; that is why the built-in builders and languages are imported on first use (below), not
at import: ``sbjax.data.dataset`` imports numpy and TFDS, and imports this registry.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from sbjax.data import options as opts
from sbjax.data.options import SourceOptions
from sbjax.errors import config_error

__all__ = ["DataSource", "SourceOptions", "register", "unregister", "names", "planted_names",
           "get", "options_for"]


class DataSource:
  """Base of the data sources: ``build(cfg, *, workdir, seq_len, global_batch_size, seed,
  process_index, process_count)`` returns the ``Dataset`` of a ``DataConfig`` (what
  ``make_dataset`` calls)."""

  name: str = ""
  options: type = SourceOptions
  # the exact next-token distributions are known (train.objective=expected is allowed);
  # such a source has ``language(options)``
  planted: bool = False
  # generated from the config alone (no text): an imported model is not measured on it
  synthetic: bool = False
  # tokens come from a tokenizer (the options' ``tokenizer`` field names an existing one)
  needs_tokenizer: bool = False

  def build(self, cfg, **batching):
    raise NotImplementedError(f"data source {self.name!r} defines no build")

  def validate(self, cfg) -> None:
    """Checks of a ``DataConfig`` beyond its options' own (ValueError naming the field)."""
    return None

  def shareable(self, options) -> bool:
    """True when one dataset of these options may serve several runs (a sweep prepares it
    once); False by default."""
    return False


class _Builtin(DataSource):
  """A built-in source: its build is ``sbjax.data.dataset.<builder>``, imported on first use
  (this module stays free of jax and numpy)."""

  def __init__(self, name: str, options: type, builder: str, needs_tokenizer: bool = False):
    self.name, self.options, self._builder = name, options, builder
    self.needs_tokenizer = needs_tokenizer

  def build(self, cfg, **batching):
    # deferred: sbjax.config validates with this module and must not import numpy or TFDS
    # (sbjax.data.dataset does, and imports this registry for make_dataset)
    return getattr(importlib.import_module("sbjax.data.dataset"), self._builder)(cfg, **batching)


class _Planted(_Builtin):
  """A planted language: ``language(options)`` is ``module:Class(**options.language_kwargs())``
  (imported on first use)."""

  planted = synthetic = True

  def __init__(self, name: str, options: type, language: str):
    super().__init__(name, options, "build_planted")
    self._language = language

  def language(self, options):
    module, cls = self._language.split(":")
    return getattr(importlib.import_module(module), cls)(**options.language_kwargs())

  def shareable(self, options) -> bool:
    return not options.data_dir  # stored streams in a data_dir of their own are not shared


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


for _s in (_Planted("planted", opts.PlantedOptions, "sbjax.data.planted:PlantedLanguage"),
           _Planted("planted_mix", opts.PlantedMixOptions, "sbjax.data.planted:PlantedMixture"),
           _Planted("planted_mos", opts.PlantedMosOptions, "sbjax.data.planted_mos:PlantedMoS"),
           _Planted("planted_tail", opts.PlantedTailOptions,
                    "sbjax.data.planted_tail:PlantedTail"),
           _Builtin("text", opts.TextOptions, "build_text_dir", needs_tokenizer=True),
           _Builtin("tfds", opts.TfdsOptions, "build_tfds", needs_tokenizer=True),
           _Builtin("tokens", opts.TokensOptions, "build_tokens")):
  register(_s)
_BUILTIN_NAMES = frozenset(_SOURCES)
