"""Tokenizers (sbjax.data.tokenizer, hf_tokenizer): sentencepiece trained on generated text,
and on a corpus of >= 150 distinct characters with the small presets' vocabularies ("too
small" naming a size that works); HF tokenizer.json files (trained locally) tokenising a text
corpus through make_dataset."""

from pathlib import Path

import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import hf_tokenizer, make_dataset
from sbjax.data import tokenizer as tok_lib
from tests._corpus import generated_docs, write_corpus
from tests._unicode_corpus import unicode_docs

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
  assert tok.separator_id == 1  # eos
  assert tok.id_to_piece(0) == "<unk>"
  # batched encode equals single encode; numpy ids decode too
  assert tok.encode(docs[:2]) == [tok.encode(docs[0]), tok.encode(docs[1])]
  assert tok.decode(np.array(tok.encode(docs[0]))) == docs[0]
  # compresses: fewer tokens than characters
  assert len(tok.encode(docs[0])) < 0.6 * len(docs[0])
  again = tok_lib.Tokenizer(tok.path)  # reloaded by path
  assert again.vocab_size == tok.vocab_size and again.encode(docs[4]) == tok.encode(docs[4])
  ids = tok.encode("kato\u00e9sa")  # no "é" in the training text: unk
  assert 0 in ids and tok.decode(ids) == "kato \u2047 sa"


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(tmp_path, model_type):
  docs = generated_docs(2, 8)
  a = tok_lib.train_tokenizer(docs, out_path=tmp_path / "a.model", vocab_size=200,
                              model_type=model_type)
  b = tok_lib.train_tokenizer(iter(docs), out_path=tmp_path / "b.model", vocab_size=200,
                              model_type=model_type)
  assert a.pieces() == b.pieces()
  assert a.serialized() == b.serialized()


def test_empty_corpus_error(tmp_path):
  with pytest.raises(ValueError, match="no text"):
    tok_lib.train_tokenizer(["", "\n  \n"], out_path=tmp_path / "x.model", vocab_size=50)


def test_load_or_train_reloads_or_copies_a_model(tmp_path):
  """(A workdir's tokenizer reused without retraining: test_data_text.)"""
  docs = generated_docs(4, 6)
  a = tok_lib.load_or_train(tmp_path, lambda: docs, vocab_size=120, model_type="unigram")
  assert a.path == str(tmp_path / "tokenizer.model")
  with pytest.raises(ValueError, match=r"has 120 pieces but the vocabulary size asked for is "
                                       r"64: set the vocabulary size to 120 "
                                       r"\(data\.options\.vocab_size\)"):
    tok_lib.load_or_train(tmp_path, lambda: docs, vocab_size=64, model_type="unigram")
  # an existing model given by path is copied into a (new) workdir
  wd = tmp_path / "other"
  c = tok_lib.load_or_train(wd, None, vocab_size=999, model_type="bpe", existing=a.path)
  assert c.path == str(wd / "tokenizer.model") and c.pieces() == a.pieces()
  with pytest.raises(FileNotFoundError, match="no such sentencepiece model"):
    tok_lib.load_or_train(tmp_path / "third", None, vocab_size=8, model_type="bpe",
                          existing=str(tmp_path / "missing.model"))


# the text vocabularies of the quick presets (target_rank 64/128, vocab_threshold 64/96,
# head_rank/saturation 96, collapse 128): all sentencepiece unigram
QUICK_VOCABS = (64, 96, 128)


@pytest.fixture(scope="module")
def docs():
  d = unicode_docs()
  assert len(set("".join(d))) >= 150
  return d


@pytest.mark.parametrize("vocab", QUICK_VOCABS)
def test_sentencepiece_small_vocab_on_a_rich_corpus(tmp_path, docs, vocab):
  tok = tok_lib.train_tokenizer(docs, out_path=tmp_path / "t.model", vocab_size=vocab)
  assert tok.vocab_size == vocab
  text = docs[0][:2000]
  ids = tok.encode(text)
  unk = sum(i == 0 for i in ids)
  assert 0 < unk <= 0.02 * len(text)  # the rarest characters map to unk, no more than 2%
  common = "Kato rimen sa lo.\nAN IS GRA"
  assert tok.decode(tok.encode(common)) == common  # frequent characters round-trip


def test_too_small_vocabulary_names_a_size_that_works(tmp_path, docs):
  """(The refusal itself: the bad-input table of train.)"""
  with pytest.raises(ValueError, match=r"distinct characters need at least (\d+) pieces") as e:
    tok_lib.train_tokenizer(docs, out_path=tmp_path / "x.model", vocab_size=12)
  assert not (tmp_path / "x.model").exists()
  need = int(str(e.value).split("need at least ")[1].split()[0])
  assert tok_lib.train_tokenizer(docs, out_path=tmp_path / "y.model",
                                 vocab_size=need).vocab_size == need


@pytest.fixture(scope="module")
def hf_json(tmp_path_factory, docs):
  d = tmp_path_factory.mktemp("hf")
  return hf_tokenizer.train_bpe(docs, d / "tokenizer.json", vocab_size=400)


def test_hf_tokenizer_json_tokenises_a_text_corpus(tmp_path, docs, hf_json):
  corpus = write_corpus(tmp_path / "c", docs)
  cfg = DataConfig(source="text", options=dict(path=str(corpus), tokenizer=hf_json.path,
                                               val_fraction=0.25))
  ds = make_dataset(cfg, seq_len=16, global_batch_size=4, workdir=str(tmp_path / "w"),
                    process_index=0, process_count=1)
  assert ds.vocab_size == hf_json.vocab_size == 400
  assert (tmp_path / "w" / "tokenizer.json").read_bytes() == hf_json.serialized()
  # reference: the tokenizers library itself, documents joined by <|endoftext|> (id 0)
  val_docs = [docs[int(n[3:5])] for n in ds.info()["val_docs"]]
  ref = []
  for d in val_docs:
    ref += hf_json.tok.encode(d, add_special_tokens=False).ids + [0]
  np.testing.assert_array_equal(np.asarray(ds.val_tokens), ref)
  assert hf_json.decode(hf_json.encode(docs[1])) == docs[1]  # byte-level: lossless
