"""A planted source's dataset (sbjax.data.dataset.build_planted): its stored streams are the
language's samples from [seed, 1] and [seed, 2], held in memory or cached as .npy files
(WORKDIR/tokens, or data.options.data_dir) and read back equal; with train_tokens=0 train
batches are drawn on demand (host: StreamingPlanted, device: planted_device), pure in (seeds,
step), the processes' rows make the global batch, and evaluation reads the stored case's
validation tokens; a stream too short for one batch is refused before anything is written."""

import json

import jax
import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import DataError, make_dataset, sources
from sbjax.data import planted_device as pdev

SMALL = dict(vocab=64, rank=4, train_tokens=40_000, val_tokens=4_000)


def mk(cfg, workdir=None, seed=2, T=32, B=8, **process):
  return make_dataset(cfg, seq_len=T, global_batch_size=B, seed=seed,
                      workdir=workdir and str(workdir), **process)


@pytest.mark.parametrize("source", ["planted", "planted_mix", "planted_mos", "planted_tail"])
def test_stored_streams_are_the_languages_samples_in_memory_or_cached(source, tmp_path):
  cfg = DataConfig(source, {**SMALL, **({} if source == "planted" else {"mix": 2})})
  lang = sources.get(source).language(cfg.options)
  mem = mk(cfg)  # no workdir: in memory; the process from jax
  np.testing.assert_array_equal(mem.train_tokens, lang.sample([0, 1], 40_000))
  np.testing.assert_array_equal(mem.val_tokens, lang.sample([0, 2], 4_000))
  np.testing.assert_array_equal(mem.planted.log_probs, lang.log_probs)
  assert mem.process_count == jax.process_count()
  written, again = mk(cfg, tmp_path), mk(cfg, tmp_path)  # sampled and cached; read back
  assert len(list((tmp_path / "tokens").glob("*.npy"))) == 2
  for ds in (written, again):
    for i in (0, 7, 500):
      np.testing.assert_array_equal(ds.train_batch(i), mem.train_batch(i))
    for x, y in zip(ds.eval_batches(2), mem.eval_batches(2)):
      np.testing.assert_array_equal(x, y)
  info = json.loads(json.dumps(again.info()))
  assert info["source"] == source and info["n_train_windows"] == (40_000 - 1) // 32
  assert info["entropy_nats"] == pytest.approx(lang.entropy, abs=1e-12)
  other = mk(cfg.replace_options(seed=1, data_dir=str(tmp_path / "tokens")))  # no workdir
  assert len(list((tmp_path / "tokens").glob("*.npy"))) == 4  # keyed by the language
  assert not np.array_equal(other.train_tokens, mem.train_tokens)


ON_DEMAND = dict(vocab=16, rank=2, mix=2, train_tokens=0, val_tokens=400)


@pytest.mark.parametrize("sampler", ["host", "device"])
def test_on_demand_batches_are_pure_in_seeds_and_step_and_shard(sampler):
  cfg = DataConfig("planted_mix", {**ON_DEMAND, "sampler": sampler})
  a, b = mk(cfg, T=8, B=4, seed=0), mk(cfg, T=8, B=4, seed=0)
  np.testing.assert_array_equal(a.train_batch(7), b.train_batch(7))  # a fresh process
  assert a.train_batch(7).shape == (4, 9) and a.train_batch(7).dtype == np.int32
  assert not np.array_equal(a.train_batch(7), a.train_batch(8))
  assert not np.array_equal(a.train_batch(7), mk(cfg, T=8, B=4, seed=1).train_batch(7))
  halves = [mk(cfg, T=8, B=4, seed=0, process_index=p, process_count=2).train_batch(7)
            for p in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves), a.train_batch(7))
  stored = mk(cfg.replace_options(train_tokens=1000, sampler="host"), T=8, B=4, seed=0)
  for x, y in zip(a.eval_batches(2), stored.eval_batches(2)):
    np.testing.assert_array_equal(x, y)
  assert a.info()["streaming"] and a.info()["n_train_tokens"] is None
  if sampler == "device":  # the batch of a traced step (as in the train step) is the same
    t = a.device_tables()
    traced = jax.jit(lambda s: pdev.train_batch(t, s, 4, 8, 1))(np.int32(7))
    np.testing.assert_array_equal(np.asarray(traced), a.train_batch(7))
  with pytest.raises(ValueError, match=">= 0"):
    a.train_batch(-1)


def test_a_stream_too_short_for_one_batch_is_refused_before_anything_is_written(tmp_path):
  cfg = DataConfig(options={**SMALL, "train_tokens": 1000})
  with pytest.raises(DataError, match=r"split 'train': 1000 tokens.*needs at least 4097 tokens"):
    mk(cfg, tmp_path / "wd", T=128, B=32)
  assert not (tmp_path / "wd").exists()
