"""The collapse experiment on token files (--data=TRAIN[,VAL] .bin/.npy; the tpu preset's
TinyStories input): the streams equal the files, the split, and the bad-input messages."""

import dataclasses

import numpy as np
import pytest

from experiments.collapse.run import is_token_files, load_corpus, token_file_corpus
from experiments.collapse.presets import get_preset
from experiments.collapse.tables import _piece
from sbjax.data.text import DataError
from sbjax.data.tokenizer import train_tokenizer
from tests._corpus import generated_docs


def test_token_files_give_the_streams(tmp_path):
  ids = (np.arange(1000) * 7919 % 50257).astype(np.uint16)
  ids.tofile(tmp_path / "train.bin")
  tr, va = token_file_corpus(str(tmp_path / "train.bin"), 50257)
  np.testing.assert_array_equal(np.concatenate([tr, va]), ids)
  assert len(va) == 100  # the last tenth, a contiguous tail
  rows = np.arange(60, dtype=np.int32).reshape(3, 20)
  np.save(tmp_path / "tr.npy", rows)
  np.save(tmp_path / "va.npy", rows[:1] + 1)
  tr, va = token_file_corpus(f"{tmp_path / 'tr.npy'},{tmp_path / 'va.npy'}", 64)
  np.testing.assert_array_equal(tr, rows.ravel())  # rows concatenated in file order
  np.testing.assert_array_equal(va, rows[0] + 1)
  # the tpu preset reads them (its vocabulary 50257; the validation budget caps the stream)
  p = get_preset("tpu")
  assert p.overrides["data.source"] == "tokens"
  tr, va, vocab, tok = load_corpus(p, tmp_path, str(tmp_path / "train.bin"))
  assert vocab == 50257 and tok is None and len(tr) + len(va) == 1000


def test_token_file_errors_name_the_problem(tmp_path):
  with pytest.raises(ValueError, match=r"--data=TRAIN.bin\[,VAL.bin\].*nothing is downloaded"):
    load_corpus(get_preset("tpu"), tmp_path, None)
  np.save(tmp_path / "big.npy", np.array([1, 2, 300], np.int32))
  with pytest.raises(DataError, match=r"big.npy: token id 300 at index 2 is outside \[0, "
                     r"data.options.vocab_size of the preset=256\)"):
    token_file_corpus(str(tmp_path / "big.npy"), 256)
  assert is_token_files("a.bin,b.bin") and not is_token_files("some/dir")


def test_token_files_take_the_tokenizer_beside_them(tmp_path, monkeypatch):
  """The device token folders (benchmarks/build_device_tokens.py: V<V>/train.uint16.bin,
  val.uint16.bin, tokenizer.model) give the report's token table pieces, not bare ids; a
  tokenizer of another vocabulary is not used (found by benchmarks/device_rehearsal.py: the
  collapse gpu report showed ids at V 1024)."""
  d = tmp_path / "V96"
  tok = train_tokenizer(generated_docs(0, 3), out_path=d / "tokenizer.model", vocab_size=96)
  ids = np.asarray(tok.encode(generated_docs(1, 1)[0]), np.uint16)
  ids.tofile(d / "train.uint16.bin")
  ids[:200].tofile(d / "val.uint16.bin")
  monkeypatch.chdir(tmp_path)  # device_science.sh passes a relative --data
  data = "V96/train.uint16.bin,V96/val.uint16.bin"
  gpu = get_preset("gpu-test")
  p = dataclasses.replace(gpu, overrides={**gpu.overrides, "data.options.vocab_size": 96})
  tr, va, vocab, path = load_corpus(p, tmp_path / "out", data)
  assert path == str((d / "tokenizer.model").resolve()) and vocab == 96
  np.testing.assert_array_equal(va, ids[:200])
  piece = _piece(tmp_path / "out", {"tokenizer": path})
  assert [piece(i) for i in range(96)] == [tok.sp.id_to_piece(i) for i in range(96)]
  other = dataclasses.replace(gpu, overrides={**gpu.overrides, "data.options.vocab_size": 128})
  assert load_corpus(other, tmp_path / "out", data)[3] is None  # V 128 != its 96 pieces
