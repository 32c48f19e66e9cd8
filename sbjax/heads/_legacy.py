"""The flat head fields of earlier versions, mapped to the typed head configs.

Up to dfd2424 ``ModelConfig`` carried every head's fields itself (``model.head`` a kind name,
``model.head_rank``, ``model.head_init``, ``model.n_mix``, ``model.mos_dim``,
``model.mos_act``), and every config.json written then holds all of them. They are the
*legacy* fields: ``from_flat`` turns a model section that holds them into one whose ``head``
is a ``{"kind": ..., field: ...}`` dict, taking from them only what the chosen kind reads
(its ``HeadKind.legacy`` names them; the others were ignored then too). ``to_flat`` is the
inverse, for the editable form that the ``--config.model.head_rank=8`` flags and the presets'
dotted keys (``"model.head_rank"``) write: those keep working unchanged.
"""

from __future__ import annotations

from sbjax.heads.base import HeadConfig, get, head_config

# the flat fields of ModelConfig up to dfd2424, with their defaults then
LEGACY_DEFAULTS = {"head_rank": 0, "head_init": "scaled", "n_mix": 1, "mos_dim": 0,
                   "mos_act": "tanh"}


def from_flat(model: dict) -> dict:
  """A model section with a typed head: ``head`` a kind name with the legacy fields beside
  it (earlier config.json files, the flag form), or a dict / ``HeadConfig`` (then a legacy
  field overrides it only when set away from its old default, e.g. a dotted override)."""
  model = dict(model)
  flat = {k: model.pop(k) for k in LEGACY_DEFAULTS if k in model}
  head = model.get("head", "dense")
  spec = head.to_dict() if isinstance(head, HeadConfig) else head
  if isinstance(spec, str):
    spec = {"kind": spec}
  if not isinstance(spec, dict):
    model["head"] = head_config(spec)  # the clear error: not a head
  spec = dict(spec)
  kind = get(spec.get("kind", "dense"))
  for name, value in flat.items():
    field = kind.legacy.get(name)
    if field is not None and (isinstance(head, str) or value != LEGACY_DEFAULTS[name]):
      spec[field] = value
  model["head"] = spec
  return model


def to_flat(model: dict) -> dict:
  """The editable (flag) form of a model section: ``head`` a kind name and the legacy fields
  (their old defaults where the kind does not read them). A head with a field that has no
  legacy name stays a dict (its fields are then set as ``model.head`` dicts)."""
  model = dict(model)
  head = model.get("head", "dense")
  spec = head.to_dict() if isinstance(head, HeadConfig) else head
  flat = dict(LEGACY_DEFAULTS)
  if isinstance(spec, dict):
    spec = dict(spec)
    kind = get(spec.pop("kind", "dense"))
    names = {field: name for name, field in kind.legacy.items()}
    if not set(spec) <= set(names):
      return {**model, "head": {"kind": kind.name, **spec}, **flat}
    flat.update({names[f]: v for f, v in spec.items()})
    spec = kind.name
  return {**model, "head": spec, **flat}

