"""Tokenizers on any corpus: sentencepiece with the small presets' vocabularies on a corpus of
>= 150 distinct characters ("too small" named when it cannot work), and HF tokenizer.json
files (trained locally) tokenising a text corpus through make_dataset."""

import numpy as np
import pytest

from sbjax.config import Config, DataConfig, ModelConfig
from sbjax.data import hf_tokenizer, make_dataset
from sbjax.data import tokenizer as tok_lib
from sbjax.train import workdir as workdir_lib
from tests._corpus import write_corpus
from tests._unicode_corpus import unicode_docs

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


def test_too_small_vocabulary_says_too_small(tmp_path, docs):
  with pytest.raises(ValueError, match=r"vocab_size=12 is too small for this corpus: its \d+ "
                                       r"distinct characters need at least (\d+) pieces"):
    tok_lib.train_tokenizer(docs, out_path=tmp_path / "x.model", vocab_size=12)
  assert not (tmp_path / "x.model").exists()
  # the size the message names works
  with pytest.raises(ValueError) as e:
    tok_lib.train_tokenizer(docs, out_path=tmp_path / "x.model", vocab_size=12)
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
  # a model vocabulary smaller than the tokenizer's is refused with the sizes named
  small = Config(model=ModelConfig(vocab_size=300))
  with pytest.raises(ValueError, match=r"model.vocab_size=300 is smaller than the data's "
                                       r"vocabulary \(400 tokens\)"):
    workdir_lib.resolve_vocab(small, ds.vocab_size)
