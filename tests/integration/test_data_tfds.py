"""TFDS catalog datasets (through tfds.testing.mock_data) and the TensorFlow-free path."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from sbjax.config import DataConfig
from sbjax.data import DataError, builders, make_dataset
from sbjax.data.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[2]


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
  stream = np.concatenate([np.array(tok.encode(t) + [tok.eos_id]) for t in expected])
  assert np.array_equal(ds.train_tokens, stream)
  pieces = np.split(ds.train_tokens, np.flatnonzero(ds.train_tokens == tok.eos_id) + 1)[:-1]
  assert [tok.decode(p[:-1]) for p in pieces] == expected
  b = ds.train_batch(5)
  assert b.shape == (4, 17) and b.dtype == np.int32 and b.max() < 24


def test_catalog_without_validation_split_splits_train(tmp_path, monkeypatch):
  real = builders._source

  def no_val(name, split, data_dir):
    if split != "train":
      raise ValueError(f"Unknown split {split!r}")
    return real(name, split, data_dir)

  monkeypatch.setattr(builders, "_source", no_val)
  with tfds.testing.mock_data(num_examples=100, policy=tfds.testing.MockPolicy.USE_CODE):
    out = builders.read_catalog("lm1b", None, "text", 0.2)
  assert len(out["train"]) == 80 and len(out["validation"]) == 20
  assert out["val_split"].startswith("train")


def test_catalog_errors(tmp_path):
  with pytest.raises(DataError, match=r"cannot open TFDS dataset 'no_such_dataset_xyz'.*"
                                      r"DatasetNotFoundError"):
    builders.read_catalog("no_such_dataset_xyz", str(tmp_path))
  with tfds.testing.mock_data(num_examples=10, policy=tfds.testing.MockPolicy.USE_CODE):
    with pytest.raises(DataError, match=r"has no feature 'body' \(data.options.text_key\)"):
      builders.read_catalog("lm1b", None, "body")


TF_FREE = textwrap.dedent("""
    import importlib.util, sys
    # Where TensorFlow is absent (the supported setup) `import tensorflow` must fail; where it
    # is installed the check below still proves that preparing and reading never import it.
    if importlib.util.find_spec("tensorflow") is None:
      try:
        import tensorflow  # noqa: F401
        raise SystemExit("import tensorflow did not fail")
      except ImportError:
        print("TF_ABSENT")
    import numpy as np
    from sbjax.config import DataConfig
    from sbjax.data import make_dataset
    corpus, wd = sys.argv[1], sys.argv[2]
    kw = dict(seq_len=16, global_batch_size=4, workdir=wd, process_index=0, process_count=1)
    t = make_dataset(DataConfig("text", dict(path=corpus, vocab_size=20)), **kw)
    p = make_dataset(DataConfig(options=dict(vocab=16, rank=2, train_tokens=4000,
                                             val_tokens=1000)), **kw)
    assert t.train_batch(0).shape == (4, 17) and p.train_batch(0).shape == (4, 17)
    assert "tensorflow" not in sys.modules, "tensorflow was imported"
    print("TF_FREE_OK", t.info()["tfds_name"], p.info()["tfds_name"])
""")


def test_preparation_works_without_tensorflow(tmp_path):
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for i in range(4):
    (corpus / f"{i}.txt").write_text(("lorem ipsum dolor sit amet\n" * 40) + f"doc {i}\n")
  r = subprocess.run([sys.executable, "-c", TF_FREE, str(corpus), str(tmp_path / "wd")],
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "TF_FREE_OK local_text/" in r.stdout and " planted_rank/" in r.stdout
  if importlib.util.find_spec("tensorflow") is None:
    assert "TF_ABSENT" in r.stdout
  recs = list((tmp_path / "wd" / "tfds").rglob("*.array_record-*"))
  assert len(recs) == 4  # train + validation for each builder


def test_preparing_a_local_dataset_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
  """TFDS's DatasetInfo.initialize_from_bucket makes (and leaves) an empty "tmp…tfds" temp
  folder for every new data dir; sbjax's builders have nothing in TFDS's bucket and skip it."""
  temp, src = tmp_path / "temp", tmp_path / "src"
  temp.mkdir(), src.mkdir()
  (src / "a.txt").write_text("to be or not to be\n" * 20)
  (src / "b.txt").write_text("good night, sweet prince\n" * 20)
  monkeypatch.setattr("tempfile.tempdir", str(temp))
  docs = builders.prepare_local_text(str(src), 0.5, str(tmp_path / "data"))
  assert sorted(docs["train_names"] + docs["validation_names"]) == ["a.txt", "b.txt"]
  assert list(temp.iterdir()) == []
