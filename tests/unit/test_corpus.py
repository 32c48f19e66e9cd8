"""One rule from ``--data`` to a data config (sbjax/studies/corpus.py), checked on configs
built by hand."""

import dataclasses

import pytest

from sbjax import overrides
from sbjax.config import DataConfig
from sbjax.data.options import TextOptions
from sbjax.data.sample_corpus import sample_corpus_dir
from sbjax.studies.corpus import corpus_overrides


def test_text_corpus_given_or_the_packaged_sample(tmp_path):
  cfg = overrides.config_from("tiny")
  got = overrides.apply(cfg, corpus_overrides("text", str(tmp_path), tmp_path / "tfds"))
  want = DataConfig("text", TextOptions(path=str(tmp_path), data_dir=str(tmp_path / "tfds")))
  assert got == dataclasses.replace(cfg, data=want)
  assert corpus_overrides("text") == {"data.source": "text",
                                      "data.options.path": str(sample_corpus_dir())}
  with pytest.raises(FileNotFoundError, match="--data=.*nope.*pass --data=DIR"):
    corpus_overrides("text", str(tmp_path / "nope"))


def test_tfds_data_names_the_dataset():
  assert corpus_overrides("tfds", "lm1b", "/x") == {"data.source": "tfds",
                                                    "data.options.name": "lm1b"}
  assert corpus_overrides("tfds", "") == {"data.source": "tfds"}  # the config's own name
