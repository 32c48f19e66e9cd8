"""What each built-in data source says of itself (sbjax.data.sources)."""

from __future__ import annotations

import pytest

from sbjax.config import DataConfig
from sbjax.data import sources

BUILTIN = ("planted", "planted_mix", "planted_mos", "text", "tfds", "tokens")


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
  with pytest.raises(ValueError, match=r"data\.source='nope'; allowed: planted \| "):
    DataConfig("nope")
