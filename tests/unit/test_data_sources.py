"""The built-in data sources' typed options (sbjax.data.options) against the flat DataConfig
fields of earlier versions (sbjax.data._legacy), and what each source says of itself."""

from __future__ import annotations

import dataclasses

import pytest

from sbjax.config import DataConfig
from sbjax.data import _legacy as legacy_data
from sbjax.data import sources

BUILTIN = ("planted", "planted_mix", "planted_mos", "text", "tfds", "tokens")


@pytest.mark.parametrize("name", BUILTIN)
def test_options_hold_exactly_the_legacy_fields_with_their_old_defaults(name):
  cls = sources.get(name).options
  fields = {f.name: f.default for f in dataclasses.fields(cls)}
  assert cls.source == name
  assert sorted(cls.legacy.values()) == sorted(fields)  # every field has its flat name, once
  for key, field in cls.legacy.items():  # the old default is the option's default
    assert legacy_data.LEGACY_DEFAULTS[key] == fields[field], (key, field)
  flat = {k: v for k, v in legacy_data.LEGACY_DEFAULTS.items() if k in cls.legacy}
  if name in ("text", "tfds", "tokens"):  # they need a corpus: the old checks, now the options'
    with pytest.raises(ValueError, match=r"data\.options\.(path|name)=''"):
      DataConfig(name, legacy_data.from_flat({"source": name, **flat})["options"])
  else:
    assert DataConfig(name) == DataConfig(name, legacy_data.from_flat({"source": name,
                                                                       **flat})["options"])


def test_what_the_sources_say_of_themselves():
  said = {n: (s.planted, s.synthetic, s.needs_tokenizer)
          for n, s in ((n, sources.get(n)) for n in BUILTIN)}
  assert said == {"planted": (True, True, False), "planted_mix": (True, True, False),
                  "planted_mos": (True, True, False), "text": (False, False, True),
                  "tfds": (False, False, True), "tokens": (False, False, False)}
  planted = sources.get("planted")
  assert planted.shareable(DataConfig().options)
  assert not planted.shareable(DataConfig().replace_options(data_dir="d").options)
  assert not sources.get("tokens").shareable(DataConfig("tokens", {"path": "t.bin"}).options)


def test_carry_over_keeps_only_fields_of_a_common_base():
  planted = DataConfig().options.to_dict()
  assert legacy_data.carry_over(planted, "planted", "planted_mos") == planted
  assert legacy_data.carry_over(planted, "planted", "tokens") == {}  # vocab means another thing
  text = DataConfig("text", {"path": "c", "vocab_size": 96}).options.to_dict()
  assert legacy_data.carry_over(text, "text", "tfds") == {
      k: v for k, v in text.items() if k != "path"}
  with pytest.raises(ValueError, match=r"data\.source='nope'; allowed: planted \| "):
    DataConfig("nope")
