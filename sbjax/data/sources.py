"""The data-source registry: one ``DataSource`` per value of ``data.source``; ``make_dataset``.

A source says what it is (``planted``, ``synthetic``, ``needs_tokenizer``: the class
attributes) and builds its ``Dataset``; nothing outside this registry compares ``data.source``
by name. Its fields are a frozen ``SourceOptions`` dataclass (``sbjax.data.options``). The
built-in ones are registered below; a new source is one new file: a ``DataSource`` subclass
with its own ``SourceOptions`` and a ``build(cfg, **batching)`` returning a
``sbjax.data.Dataset``, registered with ``register(Source())`` at import. A source module must
not import ``sbjax.config`` (it is imported by it).

This module is plain Python at import (no jax or numpy), so ``sbjax.config`` can validate
with it: the built-in builds and languages are imported on first use. Inside ``sbjax.data``
imports flow one way: ``options`` -> the generators (``planted*``, ``text``, ``tokens``,
``tokenizer``, ``hf_tokenizer``, ``catalog``) -> ``dataset`` -> this registry.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from sbjax.data import options as opts
from sbjax.data.options import SourceOptions
from sbjax.errors import config_error

__all__ = ["DataSource", "SourceOptions", "register", "unregister", "names", "get", "options_for",
           "make_dataset"]


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


class _Builtin(DataSource):
  """A built-in source: its build is ``sbjax.data.dataset.<builder>``."""

  def __init__(self, name: str, options: type, builder: str, needs_tokenizer: bool = False):
    self.name, self.options, self._builder = name, options, builder
    self.needs_tokenizer = needs_tokenizer

  def build(self, cfg, **batching):
    from sbjax.data import dataset  # deferred: numpy, jax and TFDS on first use (module doc)
    return getattr(dataset, self._builder)(cfg, **batching)


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

  def build(self, cfg, **batching):
    return super().build(cfg, lang=self.language(cfg.options), **batching)


_SOURCES: dict[str, DataSource] = {}


def register(source: DataSource) -> DataSource:
  """Add a source (a module-level call in its file); re-registering a name replaces it."""
  if not source.name or source.options.source not in ("", source.name):
    raise ValueError(f"data source {source!r} needs a name, and its options class the same "
                     f"source name (got {source.options.source!r})")
  _SOURCES[source.name] = source
  return source


def unregister(name: str) -> None:
  _SOURCES.pop(name, None)


def names() -> tuple[str, ...]:
  return tuple(_SOURCES)


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


def make_dataset(cfg, *, seq_len: int, global_batch_size: int, seed: int = 0,
                 workdir: str | None = None, process_index: int | None = None,
                 process_count: int | None = None):
  """The ``sbjax.data.Dataset`` of a ``DataConfig``: its source's ``build`` (see the module
  docstrings of sbjax.data). ``workdir`` holds ``tokenizer.model`` and the token caches
  (``sbjax.data.dataset.local_data_dir``); ``None``: planted sources are sampled in memory,
  text sources use a fresh temporary directory. The process defaults to jax's."""
  if process_index is None or process_count is None:
    import jax  # deferred: this module imports no jax (module doc)
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  return get(cfg.source).build(cfg, workdir=workdir, seq_len=seq_len,
                               global_batch_size=global_batch_size, seed=seed,
                               process_index=int(process_index), process_count=int(process_count))
