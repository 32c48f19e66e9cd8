"""The flat data fields of earlier versions, mapped to the typed source options.

Up to this change ``DataConfig`` carried every built-in source's fields itself
(``planted_vocab``, ``planted_rank``, ..., ``path``, ``tfds_name``, ``tokens_path``, ...),
and every config.json written then holds all of them. They are the *legacy* fields:
``from_flat`` turns a data section that holds them into one whose ``options`` is the dict of
the chosen source's fields, taking from them only what that source reads (its options class's
``legacy`` map names them; the others were ignored then too). ``to_flat`` is the inverse, for
the editable form that the ``--config.data.planted_vocab=64`` flags write. ``carry_over`` keeps
the options two sources share when an override changes ``data.source``; ``set_legacy`` maps a
legacy dotted key (``data.planted_rank``) onto the options of a section in the new form.
"""

from __future__ import annotations

import dataclasses

from sbjax.data import sources
from sbjax.data.options import SourceOptions

# the flat fields of DataConfig before the typed options, with their defaults then
LEGACY_DEFAULTS = {
    "path": "", "tfds_name": "", "tfds_data_dir": "", "text_key": "text", "tokenizer": "",
    "tokenizer_type": "unigram", "vocab_size": 1024, "val_fraction": 0.1, "max_docs": 0,
    "planted_vocab": 256, "planted_rank": 8, "planted_alpha": 4.0, "planted_zipf": 1.0,
    "planted_context": 1, "planted_mix": 4, "planted_seed": 0, "planted_train_tokens": 2_000_000,
    "planted_val_tokens": 65_536, "tokens_path": "", "tokens_val_path": "",
    "tokens_dtype": "uint16", "tokens_vocab": 0, "planted_gate": "uniform",
    "planted_gate_conc": 1.0,
    # not a field of earlier versions: the flag form of data.options.sampler that issue 32
    # writes (--config.data.planted_sampler=device); "host" is what every earlier run did
    "planted_sampler": "host"}


def _spec(options) -> dict | None:
  if isinstance(options, SourceOptions):
    return options.to_dict()
  return None if options is None else options


def from_flat(data: dict) -> dict:
  """A data section with typed options: the legacy fields beside ``source`` (earlier
  config.json files, the flag form) give the source's options; beside an ``options`` dict a
  legacy field overrides it only when set away from its old default (the flag form of a
  source with fields of its own)."""
  data = dict(data)
  flat = {k: data.pop(k) for k in LEGACY_DEFAULTS if k in data}
  name = data.get("source", "planted")
  spec = _spec(data.get("options"))
  if not flat or not isinstance(name, str) or name not in sources.names() \
      or not (spec is None or isinstance(spec, dict)):
    return data  # nothing to map, or DataConfig names what is wrong
  legacy = sources.get(name).options.legacy
  out = dict(spec or {})
  for key, value in flat.items():
    if key in legacy and (spec is None or value != LEGACY_DEFAULTS[key]):
      out[legacy[key]] = value
  data["options"] = out
  return data


def to_flat(data: dict) -> dict:
  """The editable (flag) form of a data section: the legacy fields (their old defaults where
  the source does not read them), and ``options`` only for fields without a legacy name."""
  data = dict(data)
  spec = dict(_spec(data.pop("options", None)) or {})
  flat = dict(LEGACY_DEFAULTS)
  for key, field in sources.get(data.get("source", "planted")).options.legacy.items():
    if field in spec:
      flat[key] = spec.pop(field)
  return {**data, **flat, **({"options": spec} if spec else {})}


def _shared_fields(old: type, new: type) -> set:
  """The fields two options classes hold through a common base (not merely the same name)."""
  common = [c for c in old.__mro__ if c in new.__mro__ and dataclasses.is_dataclass(c)]
  return {f.name for c in common for f in dataclasses.fields(c)}


def carry_over(options: dict, old_source: str, new_source: str) -> dict:
  """The options of ``old_source`` that ``new_source`` shares with it (planted -> planted_mix
  keeps vocab, rank, ...; text -> tfds keeps the tokenizer fields)."""
  if old_source == new_source or old_source not in sources.names() \
      or new_source not in sources.names():
    return options
  keep = _shared_fields(sources.get(old_source).options, sources.get(new_source).options)
  return {k: v for k, v in options.items() if k in keep}


def set_legacy(data: dict, key: str, value) -> bool:
  """Set the legacy field ``key`` on a new-form data section (its source's option of that
  legacy name); False when the source does not read it (ignored, as it was then)."""
  legacy = sources.get(data.get("source", "planted")).options.legacy
  if key not in legacy:
    return False
  data.setdefault("options", {})[legacy[key]] = value
  return True
