"""The flat config.json files of earlier versions, read by ``Config.from_dict`` only.

Up to dfd2424 ``ModelConfig`` held every head's fields flat (``model.head`` a kind name beside
``head_rank``, ``head_init``, ``n_mix``, ``mos_dim``, ``mos_act``) and ``DataConfig`` every
built-in source's (``planted_vocab``, ..., ``path``, ``tfds_name``, ``tokens_path``, ...).
``typed`` turns such a config dict into the typed form (``model.head`` a ``{"kind": ...}`` dict,
``data.options`` the source's fields), taking from the flat fields only those the chosen head
kind or source reads: the others were ignored then too.
"""

from __future__ import annotations

# flat field of earlier versions -> field of the typed head config, per head kind
HEADS = {"lowrank": {"head_rank": "rank", "head_init": "init"},
         "sigsoftmax": {"head_rank": "rank"},
         "mos": {"n_mix": "n_mix", "mos_dim": "dim", "mos_act": "act"}}
_PLANTED = {"planted_vocab": "vocab", "planted_rank": "rank", "planted_alpha": "alpha",
            "planted_zipf": "zipf", "planted_context": "context", "planted_seed": "seed",
            "planted_train_tokens": "train_tokens", "planted_val_tokens": "val_tokens",
            "tfds_data_dir": "data_dir"}
_MIX = {**_PLANTED, "planted_mix": "mix"}
_TOKENIZER = {"tokenizer": "tokenizer", "tokenizer_type": "tokenizer_type",
              "vocab_size": "vocab_size", "val_fraction": "val_fraction",
              "tfds_data_dir": "data_dir"}
# flat field of earlier versions -> field of the typed source options, per data source
SOURCES = {"planted": _PLANTED, "planted_mix": _MIX, "planted_tail": _MIX,
           "planted_mos": {**_MIX, "planted_gate": "gate", "planted_gate_conc": "gate_conc"},
           "text": {**_TOKENIZER, "path": "path"},
           "tfds": {**_TOKENIZER, "tfds_name": "name", "text_key": "text_key",
                    "max_docs": "max_docs"},
           "tokens": {"tokens_path": "path", "tokens_val_path": "val_path",
                      "tokens_dtype": "dtype", "tokens_vocab": "vocab",
                      "val_fraction": "val_fraction"}}
_FLAT = {"model": {n for m in HEADS.values() for n in m},
         "data": {n for m in SOURCES.values() for n in m}}


def _fold(section: dict, name: str) -> dict:
  """One section with its flat fields (popped) folded into its typed head or options."""
  section = dict(section)
  flat = {k: section.pop(k) for k in _FLAT[name] & set(section)}
  if not flat:
    return section
  if name == "model":
    kind = section.get("head", "dense")
    if isinstance(kind, str):  # a typed head dict is kept as it is
      section["head"] = {"kind": kind, **{f: flat[k] for k, f in HEADS.get(kind, {}).items()
                                          if k in flat}}
    return section
  table = SOURCES.get(section.get("source", "planted"), {})
  section["options"] = {**{f: flat[k] for k, f in table.items() if k in flat},
                        **(section.get("options") or {})}
  return section


def typed(d: dict) -> dict:
  """The config dict ``d`` with the flat fields of earlier versions in the typed form."""
  return {k: _fold(v, k) if k in _FLAT and isinstance(v, dict) else v for k, v in d.items()}
