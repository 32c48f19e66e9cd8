"""Flat token files carry their dtype (issue 34): a ``x.int32.bin`` name wins over the default
``data.options.dtype=uint16`` and must agree with any other configured dtype; a file whose
ids look mis-typed (every other id zero, or ids beyond any vocabulary) is refused with an
error naming the file and the fix. Before, an int32 .bin read as uint16 trained, with no
warning, on ids interleaved with zeros."""

import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import DataError, make_dataset
from sbjax.data import tokens as tokens_lib

T, B = 8, 4


def _ds(path, **kw):
  cfg = DataConfig(source="tokens", options=dict(path=str(path), **kw))
  return make_dataset(cfg, seq_len=T, global_batch_size=B, seed=0)


@pytest.fixture(scope="module")
def ids():
  return np.random.default_rng(0).integers(1, 500, 40 * T + 1)


def test_int32_bin_read_as_uint16_is_refused_naming_file_and_fix(ids, tmp_path):
  f = tmp_path / "train.bin"
  ids.astype("<i4").tofile(f)
  with pytest.raises(DataError, match=rf"token file {f} read as uint16: every other id of its "
                                      r"first \d+ is 0, as when int32 ids are read as uint16\. "
                                      r"Name the file by its dtype \(train\.int32\.bin\) or set "
                                      r"data\.options\.dtype=int32"):
    _ds(f)
  ok = _ds(f, dtype="int32")  # the configured dtype of an unnamed file
  assert ok.vocab_size == int(ids.max()) + 1


@pytest.mark.parametrize("configured", ["uint16", "int32"])  # the default, or the same
def test_dtype_in_the_name_wins_over_the_default(configured, ids, tmp_path):
  f = tmp_path / "train.int32.bin"
  ids.astype("<i4").tofile(f)
  assert tokens_lib.dtype_in_name(f) == "int32"
  arr = tokens_lib.read_tokens(f, configured)
  assert arr.dtype == np.int32
  np.testing.assert_array_equal(np.asarray(arr), ids)
  ds = _ds(f, dtype=configured)
  assert ds.vocab_size == int(ids.max()) + 1
  first = np.concatenate(ds.eval_batches(1))[0]  # a window of the ids, not of their halves
  assert any(np.array_equal(first, ids[k * T:k * T + T + 1]) for k in range(40))
  assert ds.info()["tokens_dtype"] == "int32"


def test_name_and_configured_dtype_must_agree(ids, tmp_path):
  f = tmp_path / "train.int32.bin"
  ids.astype("<i4").tofile(f)
  with pytest.raises(DataError, match=rf"token file {f} is named as int32 ids but "
                                      r"data\.options\.dtype=int64; drop data\.options\.dtype"):
    tokens_lib.read_tokens(f, "int64")


def test_uint16_ids_read_as_uint32_are_refused(ids, tmp_path):
  """Pairs of uint16 ids read as one uint32: ids far beyond any vocabulary."""
  f = tmp_path / "train.bin"
  ids[:-1].astype("<u2").tofile(f)  # an even count: a whole number of uint32 items
  with pytest.raises(DataError, match=rf"token file {f}: the largest id is \d+ >= 2\^24.*"
                                      r"look mis-typed \(read as uint32\)"):
    _ds(f, dtype="uint32")
  with pytest.raises(DataError, match=r"outside \[0, data.options.vocab=500\)"):
    _ds(f, dtype="uint32", vocab=500)  # a given vocabulary: the ids are outside it
  assert _ds(f).vocab_size == int(ids[:-1].max()) + 1  # read as what it holds
