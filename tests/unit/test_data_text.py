"""Directory corpora (sbjax.data.text): document split, tokenised and cached streams, unusable
files skipped with a warning (the refusals: the bad-input table of train)."""

import os
import re

import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import make_dataset
from sbjax.data import text
from tests._corpus import generated_docs, write_corpus

@pytest.fixture()
def corpus(tmp_path):
  return write_corpus(tmp_path / "corpus", generated_docs(0, 12))


def mk(path, workdir, seq_len=32, batch=4, vocab=200, **kw):
  cfg = DataConfig(source="text", options=dict(path=str(path), vocab_size=vocab, **kw))
  return make_dataset(cfg, seq_len=seq_len, global_batch_size=batch, seed=0,
                      workdir=str(workdir), process_index=0, process_count=1)


def test_split_is_deterministic_by_document():
  docs = [(f"d{i}.txt", f"text {i}\n") for i in range(10)]
  tr, va = text.split_documents(docs, 0.2)
  assert len(va) == 2 and len(tr) == 8
  assert text.split_documents(list(reversed(docs)), 0.2)[1] == sorted(va, reverse=True)
  assert set(tr) | set(va) == set(docs)
  # at least one document on each side
  assert [len(x) for x in text.split_documents(docs[:2], 0.01)] == [1, 1]
  assert [len(x) for x in text.split_documents(docs, 0.99)] == [1, 9]
  # one document: split at a line boundary
  (tr1,), (va1,) = text.split_documents([("one.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n")], 0.2)
  assert tr1[1] == "a\nb\nc\nd\ne\nf\ng\nh\n" and va1[1] == "i\nj\n"


def test_make_dataset_text_generated(corpus, tmp_path):
  wd = tmp_path / "wd"
  ds = mk(corpus, wd)
  assert ds.vocab_size == 200 and ds.tokenizer_path == str(wd / "tokenizer.model")
  info = ds.info()
  assert info["source"] == "text" and info["n_train_docs"] == 11 and info["n_val_docs"] == 1
  assert info["n_train_windows"] == (info["n_train_tokens"] - 1) // 32
  # the streams are the documents joined by eos, in order
  from sbjax.data.tokenizer import Tokenizer
  tok = Tokenizer(ds.tokenizer_path)
  train, _ = text.split_documents(text.scan_text_dir(corpus).docs, 0.1)
  docs = [(corpus / name).read_text(encoding="utf-8") for name, _ in train]
  pieces = np.split(ds.train_tokens, np.flatnonzero(ds.train_tokens == tok.separator_id) + 1)[:-1]
  assert [tok.decode(p[:-1]) for p in pieces] == docs
  b = ds.train_batch(3)
  assert b.shape == (4, 33) and b.dtype == np.int32 and b.max() < 200
  # caches: tokenizer and token streams are reused (no retraining), batches identical
  caches = sorted((wd / "tokens").glob("*.npy"))
  assert len(caches) == 2
  m = os.stat(ds.tokenizer_path).st_mtime_ns
  ds2 = mk(corpus, wd)  # no retraining: the tokenizer file is untouched
  assert os.stat(ds2.tokenizer_path).st_mtime_ns == m
  assert np.array_equal(ds2.train_batch(3), b)
  for x, y in zip(ds.eval_batches(2), ds2.eval_batches(2)):
    assert np.array_equal(x, y)
  arr = np.load(caches[0], allow_pickle=False)
  assert arr.dtype == np.uint16


def test_unusable_files_are_skipped_with_a_warning_naming_them(corpus, tmp_path):
  (corpus / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
  (corpus / "blank.txt").write_text("  \n\n")
  with pytest.warns(UserWarning) as w:
    ds = mk(corpus, tmp_path / "wd")
  msgs = " ".join(str(x.message) for x in w)
  assert re.search(r"skipping \S*latin1\.txt: not valid UTF-8", msgs), msgs
  assert re.search(r"skipping \S*blank\.txt: empty", msgs), msgs
  assert ds.info()["skipped_files"] == ["blank.txt", "latin1.txt"]
  assert ds.info()["n_train_docs"] + ds.info()["n_val_docs"] == 12
