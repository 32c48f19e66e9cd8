"""benchmarks/build_device_tokens.py on generated text (users do not have the Shakespeare
corpus): per V a tokenizer, flat uint16 token files named by their dtype that sbjax's token
reader and the collapse experiment read back, meta.json's counts against numpy, a manifest
whose sha256s match the files, and the size limit refused before anything is written."""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.collapse.run import token_file_corpus
from sbjax.data import tokens as tok_lib
from sbjax.data.tokenizer import Tokenizer
from tests._corpus import generated_docs, write_corpus

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import build_device_tokens as bdt  # noqa: E402

VOCABS = (96, 128)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  root = tmp_path_factory.mktemp("tokens")
  docs = generated_docs(3, 10)
  corpus = write_corpus(root / "corpus", docs)
  manifest = bdt.build(corpus, root / "device_tokens", VOCABS, log=lambda s: None)
  return root, docs, manifest


def test_files_per_vocabulary_read_back(built):
  root, docs, manifest = built
  words = set(" ".join(docs).split())
  for v in VOCABS:
    d = root / "device_tokens" / f"V{v}"
    assert sorted(p.name for p in d.iterdir()) == sorted(bdt.FILES)
    tr = tok_lib.read_tokens(d / "train.uint16.bin")  # the dtype from the name
    va = tok_lib.read_tokens(d / "val.uint16.bin")
    assert tr.dtype == np.uint16 and tr.size == (d / "train.uint16.bin").stat().st_size // 2
    assert tr.max() < v and va.max() < v and tr.size > 2 * va.size > 0
    meta = json.loads((d / "meta.json").read_text())
    counts = np.bincount(tr, minlength=v)
    assert meta["train_tokens"] == tr.size and meta["val_tokens"] == va.size
    assert meta["types_seen_under_50"] == int((counts < 50).sum())
    assert meta["types_unseen_in_train"] == int((counts == 0).sum())
    text = Tokenizer(d / "tokenizer.model").decode(va.tolist())
    assert meta["chars_per_val_token"] == pytest.approx(len(text) / va.size)
    assert set(text.split()) <= words  # the validation text is the corpus's own words
    a, b = token_file_corpus(f"{d / 'train.uint16.bin'},{d / 'val.uint16.bin'}", v)
    np.testing.assert_array_equal(a, tr)
    np.testing.assert_array_equal(b, va)
  # larger V, fewer tokens of the same text
  sizes = [manifest["files"][f"V{v}/train.uint16.bin"]["bytes"] for v in VOCABS]
  assert sizes[1] < sizes[0]
  for rel, f in manifest["files"].items():
    data = (root / "device_tokens" / rel).read_bytes()
    assert f == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
  assert manifest["total_bytes"] == sum(f["bytes"] for f in manifest["files"].values())


def test_bad_input_is_refused_before_writing(built, tmp_path):
  root = built[0]
  with pytest.raises(ValueError, match=r"the token files take .* MiB, over --max_mib=1e-05"):
    bdt.build(root / "corpus", tmp_path / "small", (96,), max_mib=1e-5, log=lambda s: None)
  assert not (tmp_path / "small").exists()
  with pytest.raises(FileNotFoundError, match="not a directory of .txt files"):
    bdt.build(tmp_path / "nothing", tmp_path / "x", (96,))
  with pytest.raises(ValueError, match="V=70000 does not fit uint16 ids"):
    bdt.build(root / "corpus", tmp_path / "x", (70000,))
  assert bdt.main(["--data", str(root / "corpus"), "--vocabs", "9x"]) == 2
