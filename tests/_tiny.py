"""The session's shared tiny run (24 steps, vocab 64): tests that train reuse its compiled step."""

import dataclasses

from sbjax import configs

TINY_RUN_TRAIN = {"steps": 24, "log_every": 1, "eval_every": 12, "ckpt_every": 12}
TINY_RUN_STEPS = [0, 1, 2, 4, 8, 12, 16, 24]


def tiny_config(**train_kw):
  """The tiny preset, vocab 64 (and ``train_kw``)."""
  cfg = configs.load("tiny")
  cfg = cfg.replace(model=dataclasses.replace(cfg.model, vocab_size=64))
  return cfg.replace(train=dataclasses.replace(cfg.train, **train_kw))


def tiny_run_config(**train_kw):
  """``tiny_config`` with TINY_RUN_TRAIN (and ``train_kw``)."""
  return tiny_config(**{**TINY_RUN_TRAIN, **train_kw})


def tiny_dataset(seed: int = 0):
  """The dataset of ``tiny_run_config()`` with data seed ``seed`` (in memory)."""
  from sbjax.data import make_dataset  # deferred: importing the config must not start JAX

  cfg = tiny_run_config()
  return make_dataset(cfg.data, seq_len=cfg.train.seq_len, global_batch_size=cfg.train.batch_size,
                      seed=seed, workdir=None)
