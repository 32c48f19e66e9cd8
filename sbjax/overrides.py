"""One override path: dotted keys applied to a Config, for the CLI (``--config.X=V``), the sweep
grids and the experiments' presets.

    apply(cfg, {"model.d_model": 64, "train.lr": 1e-3})    -> a validated Config
    config_from("tiny", {"train.steps": 300})                 -> the named config, overridden
    parse_assignment("train.steps=50", cfg)                   -> ("train.steps", 50)

It works on ``Config.to_dict()`` / ``Config.from_dict`` only, so it follows whatever the
config's fields are: a key names a path of nested dicts (``model.d_model``, and deeper ones
such as ``model.head.rank`` or ``data.options.vocab`` where a field is itself a dict). The flat
fields of earlier versions still work: ``model.head_rank`` (``sbjax.heads._legacy``) and
``data.planted_vocab``, ``data.tfds_name``, ... (``sbjax.data._legacy``: set on the options of
the source the overrides end with; ignored, as then, where that source does not read them).
When ``data.source`` changes, the options the two sources share carry over (planted ->
planted_mix keeps vocab, rank, ...). A key that is no path of the
config dict is still handed to ``Config.from_dict`` (which may accept it as a legacy alias);
when that fails the error is one line naming the key and the nearest known key:
``invalid config key 'train.stepz'; did you mean 'train.steps'?``.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from typing import Any, Mapping

from sbjax import configs
from sbjax.config import LEGACY_DATA_FIELDS, LEGACY_MODEL_FIELDS, Config
from sbjax.data import _legacy as legacy_data

# the flat data fields of earlier versions (data.planted_vocab, ...): set on the options of the
# source the overrides end with (ignored, as then, when that source does not read them)
LEGACY_DATA_KEYS = frozenset(f"data.{f}" for f in LEGACY_DATA_FIELDS)
LEGACY_KEYS = frozenset(f"model.{f}" for f in LEGACY_MODEL_FIELDS) | LEGACY_DATA_KEYS


def known_keys(d: Mapping, prefix: str = "") -> list[str]:
  """Every dotted path of ``d`` (sections and their leaves)."""
  out = []
  for k, v in d.items():
    key = f"{prefix}{k}"
    out.append(key)
    if isinstance(v, Mapping):
      out += known_keys(v, key + ".")
  return out


def unknown_key_error(key: str, known: list[str]) -> ValueError:
  """One line naming ``key`` and the nearest known key; where the key's section exists but no
  field of it is near, the section's fields."""
  section, _, field = key.rpartition(".")
  fields = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
  if section and fields:  # a known section: the nearest of its own fields, or all of them
    near = difflib.get_close_matches(field, fields, n=1, cutoff=0.6)
    hint = f"did you mean {section + '.' + near[0]!r}?" if near else \
        f"the fields of {section} are: {', '.join(sorted(fields))}"
    return ValueError(f"invalid config key {key!r}; {hint}")
  near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
  if not near:  # a field without its section ('lr' -> 'train.lr')
    last = {k.rsplit(".", 1)[-1]: k for k in reversed(known)}
    near = [last[m] for m in difflib.get_close_matches(key.rsplit(".", 1)[-1], list(last), n=1,
                                                       cutoff=0.8)]
  hint = f"did you mean {near[0]!r}?" if near else \
      "keys are section.field with section one of model, data, train, mesh (or name)"
  return ValueError(f"invalid config key {key!r}; {hint}")


def _lookup(d: dict, key: str):
  """(the dict holding the key's last part, that part), or None when a part is missing."""
  parts = key.split(".")
  for p in parts[:-1]:
    if not isinstance(d, dict) or p not in d or not isinstance(d[p], dict):
      return None
    d = d[p]
  return (d, parts[-1]) if isinstance(d, dict) and parts[-1] in d else None


def _set_new(d: dict, key: str, value: Any, known: list[str]) -> None:
  """Set a key the dict does not hold (creating sections), for from_dict to judge; a path
  through a field that is not a section is an unknown key at once."""
  *parents, last = key.split(".")
  for p in parents:
    d = d.setdefault(p, {})
    if not isinstance(d, dict):
      raise unknown_key_error(key, known)
  d[last] = value


def _set_source(d: dict, source: Any) -> None:
  """``data.source`` changed: the options the two sources share carry over."""
  data = d.get("data")
  if isinstance(data, dict) and isinstance(data.get("options"), dict):
    data["options"] = legacy_data.carry_over(data["options"], data.get("source", "planted"),
                                             source)


def _set_legacy_data(d: dict, key: str, value: Any) -> None:
  data = d.setdefault("data", {})
  if isinstance(data.get("options"), dict):  # the new form: the option of that legacy name
    legacy_data.set_legacy(data, key.removeprefix("data."), value)
  else:  # the flat form: Config.from_dict maps it
    data[key.removeprefix("data.")] = value


def _ordered(overrides: Mapping[str, Any]) -> list:
  """``data.source`` first (the options keys name its fields), the legacy data keys last (they
  land on the source the overrides end with; one before a whole ``data`` or ``data.options``
  is replaced by it, as it was then), the others in order."""
  items, legacy = [], []
  for key, value in (overrides or {}).items():
    if key in LEGACY_DATA_KEYS:
      legacy.append((key, value))
      continue
    if key in ("data", "data.options"):
      legacy = []
    items.append((key, value))
  return ([kv for kv in items if kv[0] == "data.source"]
          + [kv for kv in items if kv[0] != "data.source"] + legacy)


def apply_to_dict(d: dict, overrides: Mapping[str, Any]) -> tuple[dict, list[str]]:
  """A copy of the config dict ``d`` with ``overrides`` set; also the keys it did not hold."""
  known = known_keys(d)
  d = copy.deepcopy(dict(d))
  unknown = []
  for key, value in _ordered(overrides):
    if key in LEGACY_DATA_KEYS:
      _set_legacy_data(d, key, value)
      continue
    if key == "data.source":
      _set_source(d, value)
    hit = _lookup(d, key)
    if hit is None:
      if key not in LEGACY_KEYS:  # a flat head field of earlier versions: from_dict maps it
        unknown.append(key)
      _set_new(d, key, value, known)
    else:
      hit[0][hit[1]] = value
  return d, unknown


def from_dict(d: dict, unknown: list[str] = (), known: list[str] = ()) -> Config:
  """``Config.from_dict`` whose failure, when some key was not in the config, is one line
  naming that key and the nearest known one."""
  try:
    return Config.from_dict(d)
  except (ValueError, TypeError) as e:
    if unknown:
      raise unknown_key_error(unknown[0], list(known)) from None
    raise ValueError(str(e)) from None


def _new_form(base: Config | Mapping) -> dict:
  """A JSON copy of ``base`` with its data section in the new form (typed options), when it
  holds the flat fields of earlier versions (a named config, an old config.json)."""
  if isinstance(base, Config):
    return base.to_dict()
  d = json.loads(json.dumps(dict(base)))
  if isinstance(d.get("data"), dict):
    d["data"] = legacy_data.from_flat(d["data"])
  return d


def apply(base: Config | Mapping, overrides: Mapping[str, Any] | None) -> Config:
  """``base`` (a Config or a config dict) with dotted ``overrides`` applied, validated."""
  d = _new_form(base)
  new, unknown = apply_to_dict(d, overrides or {})
  try:
    return from_dict(new, unknown, known_keys(d) + sorted(LEGACY_KEYS))
  except ValueError as e:  # a section given a plain value: say how to set it instead
    raise (_section_given_a_value(d, overrides, str(e)) or e) from None


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


def section_error(key: str, value: Any, fields) -> ValueError:
  """One line for a section given a plain value (``--config.data.options=path=DIR``) that the
  config refused: its fields are set one by one, ``KEY.FIELD=VALUE``, or as one JSON object."""
  text = value if isinstance(value, str) else json.dumps(value)
  field, eq, val = text.partition("=")
  field = field.strip()
  if not (eq and field and "." not in field and " " not in field):
    field, val = (sorted(fields) or ["FIELD"])[0], "VALUE"
  other = "" if field in fields or not key.endswith("options") else (
      f" (with {key.rpartition('.')[0]}.source set to a source that has {field})")
  return ValueError(
      f"config override {key}={text!r}: {key} is a section (fields: "
      f"{', '.join(sorted(fields)) or 'none'}), not a value; set one field of it, e.g. "
      f"{key}.{field}={val}{other}, or give the section as a JSON object, e.g. "
      f"{key}='{json.dumps({field: val})}'")


def _section_given_a_value(d: dict, overrides: Mapping[str, Any], refusal: str
                           ) -> ValueError | None:
  """``section_error`` of the override that gives a section of ``d`` a value that is not a
  dict, when that is what the config refused (``refusal``, its message, names that key and
  wants a dict there, or is not a config error at all: ``dict('path=..')``'s); None otherwise
  (``model.head=lowrank`` is a value the config takes, ``model.head=3`` names the heads)."""
  for key, value in (overrides or {}).items():
    hit = _lookup(d, key)
    if hit and isinstance(hit[0][hit[1]], Mapping) and not isinstance(value, Mapping):
      names_it = re.search(rf"(^|[\s:]){re.escape(key)}=", refusal)
      if not refusal.startswith("invalid config") or (names_it and "allowed: a dict" in refusal):
        return section_error(key, value, list(hit[0][hit[1]]))
  return None


def parse_assignment(item: str, base: Config | Mapping) -> tuple[str, Any]:
  """``"KEY=VALUE"`` -> (KEY, VALUE typed like ``base``'s field KEY); one clear line when the
  text has no ``=`` or the value does not parse."""
  key, eq, text = item.partition("=")
  if not eq or not key:
    raise ValueError(f"config override {item!r}: expected KEY=VALUE, e.g. "
                     f"train.steps=50")
  d = base.to_dict() if isinstance(base, Config) else dict(base)
  hit = _lookup(d, key)
  current = hit[0][hit[1]] if hit else legacy_data.LEGACY_DEFAULTS.get(key.removeprefix("data."))
  try:
    return key, parse_value(text, current)
  except ValueError as e:
    raise ValueError(f"config override {key}={text!r}: {e}") from None
