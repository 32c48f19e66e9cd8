"""Packing and stateless batching; make_dataset for the planted sources."""

import json

import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import DataError, Dataset, PlantedLanguage, PlantedMixture, make_dataset
from sbjax.data import builders


def arange_ds(n_tokens=10_001, seq_len=16, batch=8, seed=0, p=0, P=1, n_val=2_001, vocab=None):
  train = np.arange(n_tokens, dtype=np.int64)
  val = np.arange(n_val, dtype=np.int64) + n_tokens
  return Dataset(train, val, seq_len=seq_len, global_batch_size=batch, seed=seed,
                 process_index=p, process_count=P, vocab_size=vocab or n_tokens + n_val,
                 name="arange")


def test_windows_are_packed_slices():
  ds = arange_ds()
  assert ds.n_train_windows == (10_001 - 1) // 16 == 625
  b = ds.train_batch(0)
  assert b.shape == (8, 17) and b.dtype == np.int32
  # each row is seq_len+1 consecutive tokens starting at a multiple of seq_len
  assert np.all(np.diff(b, axis=1) == 1)
  assert np.all(b[:, 0] % 16 == 0)
  assert b.max() < 10_001


def test_batch_is_a_pure_function_of_seed_and_index():
  a, b = arange_ds(seed=3), arange_ds(seed=3)
  order = [5, 0, 77, 5, 200, 1]
  first = {i: a.train_batch(i) for i in order}
  for i in reversed(order):
    assert np.array_equal(b.train_batch(i), first[i])
  assert not np.array_equal(arange_ds(seed=4).train_batch(5), first[5])


def test_epochs_are_permutations():
  ds = arange_ds(n_tokens=64 * 16 + 1, seq_len=16, batch=8)  # 64 windows, 8 batches / epoch
  for e in range(3):
    starts = np.concatenate([ds.train_batch(e * 8 + k)[:, 0] for k in range(8)])
    assert sorted(starts.tolist()) == list(range(0, 64 * 16, 16))
    perm = np.random.default_rng([0, e]).permutation(64)
    assert np.array_equal(starts // 16, perm)
  # a batch straddling an epoch boundary (B does not divide n_windows)
  ds2 = arange_ds(n_tokens=20 * 16 + 1, seq_len=16, batch=8)
  j = 2 * 8 + np.arange(8)  # batch 2 holds examples 16..23: epochs 0 and 1
  expect = np.where(j < 20, np.random.default_rng([0, 0]).permutation(20)[j % 20],
                    np.random.default_rng([0, 1]).permutation(20)[j % 20])
  assert np.array_equal(ds2.train_batch(2)[:, 0] // 16, expect)


@pytest.mark.parametrize("P", [2, 4])
def test_process_slices_concatenate_to_global_batch(P):
  glob = arange_ds(batch=8)
  parts = [arange_ds(batch=8, p=p, P=P) for p in range(P)]
  for i in [0, 3, 77, 78, 300]:  # 625 windows / 8: batch 78 crosses an epoch
    slices = [d.train_batch(i) for d in parts]
    assert all(s.shape == (8 // P, 17) for s in slices)
    assert np.array_equal(np.concatenate(slices), glob.train_batch(i))
    starts = [set(s[:, 0].tolist()) for s in slices]
    for a in range(P):
      for b in range(a + 1, P):
        assert not starts[a] & starts[b]
  ev = [d.eval_batches(3) for d in parts]
  for k, g in enumerate(glob.eval_batches(3)):
    assert np.array_equal(np.concatenate([e[k] for e in ev]), g)


def test_eval_batches_are_fixed():
  a, b = arange_ds(seed=1), arange_ds(seed=9)
  e1, e2, e3 = a.eval_batches(4), a.eval_batches(4), b.eval_batches(4)
  assert len(e1) == 4 and all(x.shape == (8, 17) and x.dtype == np.int32 for x in e1)
  for x, y, z in zip(e1, e2, e3):
    assert np.array_equal(x, y) and np.array_equal(x, z)
  starts = np.concatenate(e1)[:, 0]
  assert len(set(starts.tolist())) == 32  # distinct windows, spread over the split
  assert starts.min() == 10_001 and starts.max() > 10_001 + 1000
  assert np.all(np.diff(np.concatenate(e1), axis=1) == 1)
  # more than the split holds: cycles, with a warning
  with pytest.warns(UserWarning, match="windows repeat"):
    many = a.eval_batches(20)  # 160 > 125 windows
  assert len(many) == 20


def test_too_small_corpus_is_a_clear_error():
  with pytest.raises(DataError, match=r"corpus 'arange', split 'train': 100 tokens make 6 "
                                      r"windows.*needs at least 129 tokens.*smaller "
                                      r"train.batch_size or train.seq_len, or more text"):
    arange_ds(n_tokens=100, seq_len=16, batch=8)
  with pytest.raises(DataError, match=r"split 'validation': 50 tokens.*at least 129 tokens"):
    arange_ds(n_val=50, seq_len=16, batch=8)


def test_bad_arguments():
  with pytest.raises(ValueError, match="not divisible by the process count 3"):
    arange_ds(batch=8, P=3)
  with pytest.raises(ValueError, match="process_index"):
    arange_ds(p=2, P=2)
  with pytest.raises(DataError, match="token ids outside"):
    arange_ds(vocab=100)
  with pytest.raises(ValueError, match=">= 0"):
    arange_ds().train_batch(-1)


SMALL = dict(vocab=64, rank=4, train_tokens=40_000, val_tokens=4_000)


def test_make_dataset_planted_in_memory_and_tfds(tmp_path):
  cfg = DataConfig(options=SMALL)
  mem = make_dataset(cfg, seq_len=32, global_batch_size=8, seed=2, workdir=None,
                     process_index=0, process_count=1)
  assert mem.vocab_size == 64 and mem.tokenizer_path is None
  assert isinstance(mem.planted, PlantedLanguage)
  disk = make_dataset(cfg, seq_len=32, global_batch_size=8, seed=2, workdir=str(tmp_path),
                      process_index=0, process_count=1)
  # the TFDS builder wrote array_record files, and reading them back gives the same streams
  recs = list((tmp_path / "tfds" / "planted_rank").rglob("*.array_record-*"))
  assert {r.name.split(".")[0] for r in recs} == {"planted_rank-train", "planted_rank-validation"}
  assert np.array_equal(mem.train_tokens, disk.train_tokens)
  assert np.array_equal(mem.val_tokens, disk.val_tokens)
  for i in (0, 7, 500):
    assert np.array_equal(mem.train_batch(i), disk.train_batch(i))
  info = disk.info()
  json.dumps(info)
  assert info["n_train_tokens"] == 40_000 and info["n_val_tokens"] == 4_000
  assert info["n_train_windows"] == (40_000 - 1) // 32
  assert info["source"] == "planted" and info["tfds_name"].startswith("planted_rank/")
  assert abs(info["entropy_nats"] - mem.planted.entropy) < 1e-12
  # the builder alone (no language object passed) samples the same streams
  alone = builders.prepare_planted(cfg.options.stream_params(), str(tmp_path / "alone"))
  assert np.array_equal(alone["train"], mem.train_tokens)
  # val and train streams differ (independent samples)
  assert not np.array_equal(mem.train_tokens[:4000], mem.val_tokens)
  # a different planted seed changes the language and its cache entry
  other = make_dataset(DataConfig(options={**SMALL, "seed": 1}), seq_len=32,
                       global_batch_size=8, workdir=str(tmp_path), process_index=0,
                       process_count=1)
  assert not np.array_equal(other.train_tokens, disk.train_tokens)
  assert len(list((tmp_path / "tfds" / "planted_rank").iterdir())) == 2


def test_make_dataset_planted_mix_and_process_defaults():
  cfg = DataConfig(source="planted_mix", options=dict(mix=3, **SMALL))
  ds = make_dataset(cfg, seq_len=16, global_batch_size=4, seed=0)  # process from jax
  assert isinstance(ds.planted, PlantedMixture) and ds.planted.n_mix == 3
  assert ds.process_count >= 1 and ds.train_batch(0).shape == (4 // ds.process_count, 17)
  assert len(ds.eval_batches(2)) == 2


def test_make_dataset_planted_too_small():
  cfg = DataConfig(options={**SMALL, "train_tokens": 1000})
  with pytest.raises(DataError, match=r"split 'train': 1000 tokens.*needs at least 4097 tokens"):
    make_dataset(cfg, seq_len=128, global_batch_size=32, process_index=0, process_count=1)
