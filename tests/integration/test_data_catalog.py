"""TFDS catalog datasets (sbjax.data.catalog, ``data.source=tfds``) through
tfds.testing.mock_data, read without TensorFlow."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from sbjax.config import DataConfig
from sbjax.data import DataError, catalog, make_dataset
from sbjax.data.tokenizer import Tokenizer


def mk(name, workdir, vocab=24, **kw):
  cfg = DataConfig(source="tfds", options=dict(name=name, vocab_size=vocab, **kw))
  return make_dataset(cfg, seq_len=16, global_batch_size=4, seed=0, workdir=str(workdir),
                      process_index=0, process_count=1)


@pytest.mark.parametrize("name", ["lm1b", "tiny_shakespeare"])
def test_catalog_dataset_with_mock_data(name, tmp_path):
  """mock_data patches tfds.data_source with random examples generated from the builder's
  features (USE_CODE: no metadata files needed). The pipeline must read exactly them."""
  with tfds.testing.mock_data(num_examples=120, policy=tfds.testing.MockPolicy.USE_CODE):
    src = tfds.data_source(name, split="train")
    expected = [x["text"] for x in (src[i] for i in range(len(src)))]
    expected = [t.decode() if isinstance(t, bytes) else t for t in expected]
    ds = mk(name, tmp_path / "wd")
  assert len(expected) == 120 and all(isinstance(t, str) and t for t in expected)
  info = ds.info()
  assert info["source"] == "tfds" and info["val_split"] == "validation"
  assert info["n_train_docs"] == 120 and info["tfds_name"].startswith(name + "/")
  assert ds.vocab_size == 24 and Path(ds.tokenizer_path) == tmp_path / "wd" / "tokenizer.model"
  tok = Tokenizer(ds.tokenizer_path)
  pieces = np.split(ds.train_tokens, np.flatnonzero(ds.train_tokens == tok.separator_id) + 1)[:-1]
  assert [tok.decode(p[:-1]) for p in pieces] == expected
  b = ds.train_batch(5)
  assert b.shape == (4, 17) and b.dtype == np.int32 and b.max() < 24
  assert "tensorflow" not in sys.modules  # array_record sources need no TensorFlow


def test_catalog_without_validation_split_splits_train(tmp_path, monkeypatch):
  real = catalog._source

  def no_val(name, split, data_dir):
    if split != "train":
      raise ValueError(f"Unknown split {split!r}")
    return real(name, split, data_dir)

  monkeypatch.setattr(catalog, "_source", no_val)
  with tfds.testing.mock_data(num_examples=100, policy=tfds.testing.MockPolicy.USE_CODE):
    out = catalog.read_catalog("lm1b", None, "text", 0.2)
  assert len(out["train"]) == 80 and len(out["validation"]) == 20
  assert out["val_split"].startswith("train")


def test_catalog_errors(tmp_path):
  with pytest.raises(DataError, match=r"cannot open TFDS dataset 'no_such_dataset_xyz'.*"
                                      r"DatasetNotFoundError"):
    catalog.read_catalog("no_such_dataset_xyz", str(tmp_path))
  with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
    with pytest.raises(DataError, match=r"has no feature 'body' \(data.options.text_key\)"):
      catalog.read_catalog("lm1b", None, "body")
