"""The ``tokens`` data source: .npy rows and flat .bin streams, order, held-out tail, bad files."""

import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import DataError, Dataset, make_dataset
from sbjax.data import tokens as tokens_lib

T, B = 8, 4


def _ds(path, *, val="", seq_len=T, batch=B, p=0, P=1, seed=0, **kw):
  cfg = DataConfig(source="tokens", options=dict(path=str(path), val_path=str(val), **kw))
  return make_dataset(cfg, seq_len=seq_len, global_batch_size=batch, seed=seed,
                      process_index=p, process_count=P)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("tok")
  rng = np.random.default_rng(0)
  rows = rng.integers(0, 50, (24, T + 1)).astype(np.int32)  # Pythia-style [n, T+1]
  long_rows = rng.integers(0, 50, (6, 3 * T + 3)).astype(np.int64)  # 3 windows per row
  stream = rng.integers(0, 500, 40 * T + 1).astype(np.uint16)
  val = rng.integers(0, 500, 12 * T + 1).astype(np.uint16)
  np.save(d / "rows.npy", rows)
  np.save(d / "long.npy", long_rows)
  stream.tofile(d / "train.uint16.bin")
  val.tofile(d / "val.uint16.bin")
  return d, rows, long_rows, stream, val


def test_npy_rows_are_windows_and_eval_is_in_file_order(files):
  d, rows, *_ = files
  ds = _ds(d / "rows.npy", val=d / "rows.npy", batch=4)
  assert ds.n_train_windows == ds.n_val_windows == 24 and ds.vocab_size == int(rows.max()) + 1
  ev = np.concatenate(ds.eval_batches(3))
  np.testing.assert_array_equal(ev, rows[:12])  # the first 12 rows, in order
  tr = np.concatenate([ds.train_batch(i) for i in range(6)])  # one epoch
  perm = np.random.default_rng([0, 0]).permutation(24)
  np.testing.assert_array_equal(tr, rows[perm])
  long_rows = files[2]  # rows of 3 windows each: cut inside the rows
  ev = np.concatenate(_ds(d / "long.npy", val=d / "long.npy", batch=2).eval_batches(9))
  expect = np.stack([long_rows[r, c * T:c * T + T + 1] for r in range(6) for c in range(3)])
  np.testing.assert_array_equal(ev, expect)


def test_flat_bin_equals_the_packed_stream_dataset(files):
  d, _, _, stream, val = files
  tok = _ds(d / "train.uint16.bin", val=d / "val.uint16.bin", seed=3, vocab=500)
  ref = Dataset(stream.astype(np.int64), val.astype(np.int64), seq_len=T, global_batch_size=B,
                seed=3, vocab_size=500)
  assert tok.n_train_windows == ref.n_train_windows == 40
  for i in (0, 7, 9, 10, 33):  # batch 10 crosses an epoch
    np.testing.assert_array_equal(tok.train_batch(i), ref.train_batch(i))
  np.testing.assert_array_equal(np.concatenate(tok.eval_batches(3)),
                                np.stack([val[k * T:k * T + T + 1] for k in range(12)]))


@pytest.mark.parametrize("named,configured", [(True, ""), (True, "int32"), (False, "int32")])
def test_a_flat_file_is_read_as_the_dtype_its_name_or_the_config_gives(named, configured,
                                                                      tmp_path):
  ids = np.random.default_rng(0).integers(1, 500, 40 * T + 1)
  f = tmp_path / ("train.int32.bin" if named else "train.bin")
  ids.astype("<i4").tofile(f)
  np.testing.assert_array_equal(np.asarray(tokens_lib.read_tokens(f, configured)), ids)
  ds = _ds(f, dtype=configured)
  assert ds.vocab_size == int(ids.max()) + 1 and ds.info()["tokens_dtype"] == "int32"
  first = np.concatenate(ds.eval_batches(1))[0]  # a window of the ids, not of their halves
  assert any(np.array_equal(first, ids[k * T:k * T + T + 1]) for k in range(40))


def test_held_out_tail_without_a_validation_file(files):
  d, rows, *_ = files
  ds = _ds(d / "rows.npy", batch=4, val_fraction=0.25)
  assert (ds.n_train_windows, ds.n_val_windows) == (18, 6)
  np.testing.assert_array_equal(np.concatenate(ds.eval_batches(1)), rows[18:22])
  starts = np.concatenate([ds.train_batch(i) for i in range(4)])  # no validation row in train
  assert not {r.tobytes() for r in starts} & {r.tobytes() for r in rows[18:]}


def test_bad_token_files(tmp_path, files):
  """(A flat .bin that declares no dtype, or one its name contradicts, rows shorter than T+1:
  the bad-input table of train; ids beyond the vocabulary: of analyze; a missing file:
  test_remote_paths.)"""
  d, rows, *_ = files
  (tmp_path / "odd.uint16.bin").write_bytes(b"\0" * 7)
  with pytest.raises(DataError, match="7 bytes, not a multiple of the uint16 item size 2"):
    _ds(tmp_path / "odd.uint16.bin")
  np.save(tmp_path / "f.npy", rows.astype(np.float32))
  with pytest.raises(DataError, match="token ids must be integers"):
    _ds(tmp_path / "f.npy")
  with pytest.raises(DataError, match="24 windows of seq_len\\+1=9 tokens, fewer than one "
                                      "global batch of 32"):
    _ds(d / "rows.npy", val=d / "rows.npy", batch=32)
  neg = rows.astype(np.int32).copy()
  neg[3, 2] = -1
  with pytest.raises(DataError, match="token id -1 at row 3, column 2"):
    tokens_lib.check_ids(neg, 50)
