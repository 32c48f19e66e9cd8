"""One override path: dotted keys applied to a Config, for the command line (``--config.K=V``),
the sweep grids and the experiments' presets.

    apply(cfg, {"model.head": "lowrank", "model.head.rank": 8})  -> a validated Config
    config_from("tiny", {"train.steps": 300})                     -> the named config, overridden
    apply(cfg, {"train.steps": "50"}, parse=True)                 -> text typed like its field

A key is a path of ``Config.to_dict()``: ``train.lr``, ``model.head.rank``,
``data.options.vocab``. ``model.head`` takes a kind name (that kind, with its defaults) and
``data.source`` a source (the options the two sources share carry over: planted ->
planted_mix keeps vocab, rank, ...); these are applied first, so the keys of the new kind's
fields may come in any order. A mapping sets a section whole (its defaults, then the fields
given); a key inside a section that a later key sets whole is dropped. A key that is no
path of the config is one line naming the nearest known key:
``invalid config key 'train.stepz'; did you mean 'train.steps'?``. The Config is built, and
validated, once, from the final dict.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any, Mapping

from sbjax import configs
from sbjax.config import Config
from sbjax.data import sources as data_sources
from sbjax.heads import base as heads

KINDS = ("model.head.kind", "data.source")  # keys that decide which fields their section has


def known_keys(d: Mapping, prefix: str = "") -> list[str]:
  """Every dotted path of ``d`` (sections and their leaves)."""
  out = []
  for k, v in d.items():
    out.append(f"{prefix}{k}")
    if isinstance(v, Mapping):
      out += known_keys(v, f"{prefix}{k}.")
  return out


def unknown_key_error(key: str, known: list[str]) -> ValueError:
  """One line naming ``key`` and the nearest known key (a field without its section: the full
  key); where the section exists but none of its fields is near, its fields."""
  section, _, field = key.rpartition(".")
  fields = sorted(k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section)
  near = [f"{section}.{m}" for m in difflib.get_close_matches(field, fields, n=1, cutoff=0.6)]
  if not near and section and fields:
    return ValueError(f"invalid config key {key!r}; the fields of {section} are: "
                      f"{', '.join(fields)}")
  last = {k.rsplit(".", 1)[-1]: k for k in reversed(known)}
  near = near or difflib.get_close_matches(key, known, n=1, cutoff=0.6) or [
      last[m] for m in difflib.get_close_matches(field or key, list(last), n=1, cutoff=0.8)]
  hint = f"did you mean {near[0]!r}?" if near else \
      "keys are section.field with section one of model, data, train, mesh (or name)"
  return ValueError(f"invalid config key {key!r}; {hint}")


def _defaults(cls) -> dict:
  return {f.name: f.default for f in dataclasses.fields(cls)}


def _shared(old: type, new: type) -> set:
  """The fields two options classes hold through a common base (not merely the same name)."""
  common = [c for c in old.__mro__ if c in new.__mro__ and dataclasses.is_dataclass(c)]
  return {f.name for c in common for f in dataclasses.fields(c)}


def _choose(d: dict, key: str, kind: Any) -> None:
  """Set a head kind (the head becomes that kind with its defaults) or a data source (the
  options it shares with the old one carry over, the others take its defaults)."""
  if key == "model.head.kind":
    d["model"]["head"] = heads.head_config(kind).to_dict()  # (its error: not a kind)
    return
  data, new = d["data"], data_sources.get(kind).options
  keep = _shared(data_sources.get(data["source"]).options, new)
  data["options"] = {**_defaults(new), **{k: v for k, v in data["options"].items() if k in keep}}
  data["source"] = kind


def _fresh(d: dict, key: str, value: Mapping) -> dict:
  """The defaults of the section ``key`` set whole to ``value``: a head's of its kind (value's,
  else the current one), the options' of the data source (value's, else the current one)."""
  if key == "model.head":
    return heads.head_config(value.get("kind", d["model"]["head"]["kind"])).to_dict()
  if key in ("data", "data.options"):
    source = value.get("source", d["data"]["source"]) if key == "data" else d["data"]["source"]
    options = _defaults(data_sources.get(source).options)
    return {"source": source, "options": options} if key == "data" else options
  return Config().to_dict()[key]  # model, train, mesh


def _ordered(items) -> list:
  """Items in the order they apply: whole sections, then head kinds and data sources, then
  the rest, each in the given order; a key inside a section that a later key sets whole is
  dropped (the later one replaces it)."""
  items = list(items)
  kept = [(k, v) for i, (k, v) in enumerate(items) if not any(
      k.startswith(k2 + ".") and isinstance(v2, Mapping) for k2, v2 in items[i + 1:])]
  rank = {k: 0 if "." not in k else 1 if k in KINDS or k == "model.head" else 2 for k, _ in kept}
  return sorted(kept, key=lambda kv: rank[kv[0]])


def _set(d: dict, key: str, value: Any, parse: bool) -> None:
  """Set one dotted key of the config dict ``d`` (``parse``: a str value is command-line text)."""
  *path, last = key.split(".")
  parent = d
  for p in path:
    parent = parent.get(p) if isinstance(parent, dict) else None
  if not isinstance(parent, dict) or last not in parent:
    raise unknown_key_error(key, known_keys(d))
  current = parent[last]
  if parse and isinstance(value, str):
    try:
      value = parse_value(value, current)
    except ValueError as e:
      raise ValueError(f"config override {key}={value!r}: {e}") from None
  value = value.to_dict() if hasattr(value, "to_dict") else value  # a head config, options
  if key == "model.head" and not isinstance(value, Mapping):
    key = "model.head.kind"  # a kind name
  if key in KINDS:
    _choose(d, key, value)
  elif not isinstance(current, dict):
    parent[last] = value
  elif not isinstance(value, Mapping):  # a section given a plain value
    raise ValueError(f"config override {key}={value!r}: {key} is a section (fields: "
                     f"{', '.join(sorted(current)) or 'none'}); set one field, "
                     f"{key}.FIELD=VALUE, or the section as a JSON object")
  else:  # a section set whole: its defaults, then the fields given
    parent[last] = _fresh(d, key, value)
    for k, v in _ordered((f"{key}.{k}", v) for k, v in value.items()):
      if k not in KINDS:  # (the kind or source: in its defaults already)
        _set(d, k, v, False)


def apply(base: Config, overrides: Mapping[str, Any] | None, parse: bool = False) -> Config:
  """``base`` with the dotted ``overrides`` applied, validated once; ``parse``: the str values
  are command-line text, typed like the fields they set (``parse_value``)."""
  if not overrides:
    return base
  d = base.to_dict()
  for key, value in _ordered(overrides.items()):
    _set(d, key, value, parse)
  try:
    return Config.from_dict(d)
  except TypeError as e:  # a value of another type than its field's (a text for a number)
    raise ValueError(f"invalid config: {e}") from None


def config_from(base: str, overrides: Mapping[str, Any] | None = None) -> Config:
  """The named config ``base`` (``sbjax/configs.py``: tiny, planted, ...) with dotted overrides,
  e.g. ``{"model.d_model": 64, "train.steps": 300}`` (an experiment preset's overrides)."""
  return apply(configs.get(base), overrides)


def parse_value(text: str, current: Any) -> Any:
  """The value of ``KEY=text`` on the command line, typed like the field's current value
  (bool: true/false/1/0; int; float; list: JSON or comma-separated; else JSON, or the text)."""
  if isinstance(current, bool):
    low = text.strip().lower()
    if low not in ("true", "false", "1", "0"):
      raise ValueError(f"expected true or false, got {text!r}")
    return low in ("true", "1")
  if isinstance(current, int):
    return int(text)
  if isinstance(current, float):
    return float(text)
  if isinstance(current, str):
    return text
  if isinstance(current, (list, tuple)) and not text.lstrip().startswith("["):
    return [json.loads(x) if _is_json(x) else x for x in text.split(",") if x.strip()]
  return json.loads(text) if _is_json(text) else text


def _is_json(text: str) -> bool:
  try:
    json.loads(text)
  except ValueError:
    return False
  return True


def split_assignment(item: str) -> tuple[str, str]:
  """``"KEY=VALUE"`` -> (KEY, VALUE text); one clear line when there is no ``=``."""
  key, eq, text = item.partition("=")
  if not eq or not key:
    raise ValueError(f"config override {item!r}: expected KEY=VALUE, e.g. "
                     f"train.steps=50")
  return key, text
