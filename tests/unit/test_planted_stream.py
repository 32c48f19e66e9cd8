"""Streaming planted train batches (``data.options.train_tokens = 0``,
sbjax.data.planted_stream / dataset.StreamingPlanted): pure in (seeds, step) (bitwise resume),
sharded rows == the unsharded batch, the validation split identical to the stored case, and
the tokens really follow the language (mean log-prob ≈ −H)."""


import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import make_dataset

CFG = DataConfig(source="planted_mix", options=dict(vocab=16, rank=2, mix=2, train_tokens=0,
                                                    val_tokens=400))


def ds(cfg=CFG, seed=0, p=0, n=1):
  return make_dataset(cfg, seq_len=8, global_batch_size=4, seed=seed, workdir=None,
                      process_index=p, process_count=n)


def test_streaming_batches_are_pure_and_shard():
  a, b = ds(), ds()
  np.testing.assert_array_equal(a.train_batch(7), b.train_batch(7))  # a fresh process
  assert a.train_batch(7).shape == (4, 9) and a.train_batch(7).dtype == np.int32
  assert not np.array_equal(a.train_batch(7), a.train_batch(8))
  assert not np.array_equal(a.train_batch(7), ds(seed=1).train_batch(7))
  halves = [ds(p=p, n=2).train_batch(7) for p in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves), a.train_batch(7))
  stored = ds(CFG.replace_options(train_tokens=1000))
  for x, y in zip(a.eval_batches(2), stored.eval_batches(2)):
    np.testing.assert_array_equal(x, y)
  assert a.info()["streaming"] and a.info()["n_train_tokens"] is None
  with pytest.raises(ValueError, match="no stored train windows"):
    a.train_windows(0)
  with pytest.raises(ValueError, match=">= 0"):
    a.train_batch(-1)


def test_streaming_tokens_follow_the_language():
  a = ds()
  lang = a.planted
  lp = np.concatenate([lang.sequence_log_probs(row) for i in range(60)
                       for row in a.train_batch(i)])
  assert abs(-lp.mean() - lang.entropy) < 0.15, (-lp.mean(), lang.entropy)
