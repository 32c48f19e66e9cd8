"""SentencePiece tokenizer: real training on generated text (always), Shakespeare (if present)."""

import os
from pathlib import Path

import numpy as np
import pytest

from sbjax.data import tokenizer as tok_lib
from tests._corpus import generated_docs

REPO = Path(__file__).resolve().parents[2]
SHAKESPEARE = REPO.parent / "shared" / "data" / "shakespeare"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  out = tmp_path_factory.mktemp("tok") / "tokenizer.model"
  docs = generated_docs(0, 20)
  return tok_lib.train_tokenizer(docs, out_path=out, vocab_size=300), docs


def test_generated_round_trip(trained):
  tok, docs = trained
  assert tok.vocab_size == 300
  assert Path(tok.path).is_file() and Path(tok.path).with_suffix(".vocab").is_file()
  held_out = generated_docs(1, 3)  # same alphabet, unseen text
  for text in docs[:3] + held_out + ["  kato  sari\n\nmen lo  "]:
    ids = tok.encode(text)
    assert max(ids) < tok.vocab_size and min(ids) >= 0
    assert tok.decode(ids) == text
  assert tok.eos_id == 1 and tok.separator_id == 1
  assert tok.id_to_piece(0) == "<unk>"
  # batched encode equals single encode; numpy ids decode too
  assert tok.encode(docs[:2]) == [tok.encode(docs[0]), tok.encode(docs[1])]
  assert tok.decode(np.array(tok.encode(docs[0]))) == docs[0]
  # compresses: fewer tokens than characters
  assert len(tok.encode(docs[0])) < 0.6 * len(docs[0])


def test_unseen_characters_become_unk(trained):
  tok, _ = trained
  ids = tok.encode("kato\u00e9sa")  # no "é" in the training text
  assert 0 in ids and tok.decode(ids) == "kato \u2047 sa"


def test_reload_by_path(trained):
  tok, docs = trained
  again = tok_lib.Tokenizer(tok.path)
  assert again.vocab_size == tok.vocab_size
  assert again.encode(docs[4]) == tok.encode(docs[4])


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(tmp_path, model_type):
  docs = generated_docs(2, 8)
  a = tok_lib.train_tokenizer(docs, out_path=tmp_path / "a.model", vocab_size=200,
                              model_type=model_type)
  b = tok_lib.train_tokenizer(iter(docs), out_path=tmp_path / "b.model", vocab_size=200,
                              model_type=model_type)
  assert a.pieces() == b.pieces()
  assert a.serialized() == b.serialized()


def test_train_from_files(tmp_path):
  docs = generated_docs(3, 4)
  files = []
  for i, d in enumerate(docs):
    f = tmp_path / f"d{i}.txt"
    f.write_text(d, encoding="utf-8")
    files.append(f)
  a = tok_lib.train_tokenizer(files=files, out_path=tmp_path / "f.model", vocab_size=150)
  b = tok_lib.train_tokenizer(docs, out_path=tmp_path / "t.model", vocab_size=150)
  assert a.pieces() == b.pieces()


def test_vocab_too_large_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match=r"vocab_size=5000 is too large for this corpus "
                                       r"\(this corpus supports at most \d+\).*smaller"):
    tok_lib.train_tokenizer(["a tiny corpus\nof two lines"], out_path=tmp_path / "x.model",
                            vocab_size=5000)
  assert not (tmp_path / "x.model").exists()


def test_empty_corpus_error(tmp_path):
  with pytest.raises(ValueError, match="no text"):
    tok_lib.train_tokenizer(["", "\n  \n"], out_path=tmp_path / "x.model", vocab_size=50)


def test_load_or_train_reuses_existing(tmp_path):
  docs = generated_docs(4, 6)
  calls = []

  def texts():
    calls.append(1)
    return docs

  a = tok_lib.load_or_train(tmp_path, texts, vocab_size=120, model_type="unigram")
  mtime = os.stat(a.path).st_mtime_ns
  b = tok_lib.load_or_train(tmp_path, texts, vocab_size=120, model_type="unigram")
  assert len(calls) == 1 and os.stat(b.path).st_mtime_ns == mtime
  assert a.path == b.path == str(tmp_path / "tokenizer.model")
  with pytest.raises(ValueError, match=r"has 120 pieces but the vocabulary size asked for is "
                                       r"64: set the vocabulary size to 120 "
                                       r"\(data\.options\.vocab_size\)"):
    tok_lib.load_or_train(tmp_path, texts, vocab_size=64, model_type="unigram")
  # an existing model given by path is copied into a (new) workdir
  wd = tmp_path / "other"
  c = tok_lib.load_or_train(wd, texts, vocab_size=999, model_type="bpe", existing=a.path)
  assert c.path == str(wd / "tokenizer.model") and c.pieces() == a.pieces()
  with pytest.raises(FileNotFoundError, match="no such sentencepiece model"):
    tok_lib.load_or_train(tmp_path / "third", texts, vocab_size=8, model_type="bpe",
                          existing=str(tmp_path / "missing.model"))


@pytest.mark.skipif(not SHAKESPEARE.is_dir(), reason="../shared/data/shakespeare not present")
def test_shakespeare_round_trip(tmp_path):
  files = sorted(SHAKESPEARE.glob("*.txt"))
  assert len(files) >= 40
  tok = tok_lib.train_tokenizer(files=files, out_path=tmp_path / "tokenizer.model",
                                vocab_size=1024, model_type="bpe")
  assert tok.vocab_size == 1024
  n_chars = n_tokens = 0
  for f in files:
    text = f.read_text(encoding="utf-8")
    ids = tok.encode(text)
    assert tok.decode(ids) == text, f.name
    n_chars, n_tokens = n_chars + len(text), n_tokens + len(ids)
  assert n_tokens < 0.5 * n_chars  # a real subword vocabulary
