"""Packing and stateless batching (sbjax.data.dataset.Dataset) against the documented order
written out in numpy: windows, epochs, process slices, fixed evaluation batches, refusals."""

import numpy as np
import pytest

from sbjax.data import DataError, Dataset


def arange_ds(n_tokens=10_001, seq_len=16, batch=8, seed=0, p=0, P=1, n_val=2_001, vocab=None):
  """Token value = its position, so a window names its own start."""
  train = np.arange(n_tokens, dtype=np.int64)
  val = np.arange(n_val, dtype=np.int64) + n_tokens
  return Dataset(train, val, seq_len=seq_len, global_batch_size=batch, seed=seed,
                 process_index=p, process_count=P, vocab_size=vocab or n_tokens + n_val,
                 name="arange")


def documented_batch(n_windows, seq_len, batch, seed, i):
  """Example j = i B + b is window perm_e[j mod n] of epoch e = j div n, perm_e from
  default_rng([seed, e]); a window is the seq_len + 1 tokens from its start k seq_len."""
  epoch, pos = np.divmod(i * batch + np.arange(batch), n_windows)
  w = [np.random.default_rng([seed, int(e)]).permutation(n_windows)[p] for e, p in zip(epoch, pos)]
  return np.asarray(w)[:, None] * seq_len + np.arange(seq_len + 1)


def test_train_batches_follow_the_documented_order_in_any_call_order():
  ds = arange_ds(n_tokens=20 * 16 + 1, seed=3)  # 20 windows: batch 2 straddles two epochs
  assert ds.n_train_windows == 20 and ds.info()["steps_per_epoch"] == 20 / 8
  for i in (5, 0, 2, 77, 5):  # a pure function of (seed, i): resuming needs no replay
    b = ds.train_batch(i)
    assert b.dtype == np.int32 and b.shape == (8, 17)
    np.testing.assert_array_equal(b, documented_batch(20, 16, 8, 3, i))
  assert not np.array_equal(arange_ds(n_tokens=20 * 16 + 1, seed=4).train_batch(5),
                            ds.train_batch(5))


@pytest.mark.parametrize("P", [2, 4])
def test_process_slices_concatenate_to_the_global_batch(P):
  glob = arange_ds(batch=8)
  parts = [arange_ds(batch=8, p=p, P=P) for p in range(P)]
  for i in [0, 3, 77, 78, 300]:  # 625 windows / 8: batch 78 crosses an epoch
    slices = [d.train_batch(i) for d in parts]
    assert all(s.shape == (8 // P, 17) for s in slices)
    np.testing.assert_array_equal(np.concatenate(slices), glob.train_batch(i))
  ev = [d.eval_batches(3) for d in parts]
  for k, g in enumerate(glob.eval_batches(3)):
    np.testing.assert_array_equal(np.concatenate([e[k] for e in ev]), g)


def test_eval_batches_are_fixed_and_spread_over_the_split():
  a, b = arange_ds(seed=1), arange_ds(seed=9)
  e1 = a.eval_batches(4)
  for x, y, z in zip(e1, a.eval_batches(4), b.eval_batches(4)):  # no data seed, no state
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(x, z)
  starts = np.concatenate(e1)[:, 0] - 10_001
  np.testing.assert_array_equal(starts // 16, np.arange(32) * 125 // 32)  # evenly spaced
  with pytest.warns(UserWarning, match="windows repeat"):
    many = a.eval_batches(20)  # 160 > 125 windows: they cycle
  np.testing.assert_array_equal(np.concatenate(many)[:, 0] - 10_001, np.arange(160) % 125 * 16)


def test_bad_arguments_and_too_little_data_are_refused_naming_the_fix():
  with pytest.raises(DataError, match=r"split 'validation': 50 tokens.*at least 129 tokens"):
    arange_ds(n_val=50)
  with pytest.raises(ValueError, match="not divisible by the process count 3"):
    arange_ds(P=3)
  with pytest.raises(ValueError, match="process_index"):
    arange_ds(p=2, P=2)
  with pytest.raises(DataError, match="token ids outside"):
    arange_ds(vocab=100)
