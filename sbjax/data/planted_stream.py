"""On-demand train batches of a planted language: ``data.options.train_tokens = 0``.

A stored train stream of Pythia's token count (294M tokens per arm at 143,770 steps of
32 x 64) takes minutes of host sampling and GBs of memory before the first step. With
``train_tokens = 0`` nothing is stored: global train batch i is

    lang.sample(default_rng([planted_seed, STREAM_TAG, data_seed, i]), (B, T + 1))

i.e. B independent chains of T + 1 tokens, each started from the stationary distribution
(fresh tokens every step; no window ever repeats). It is a pure function of
(planted_seed, data_seed, i), so resuming at step i needs no replay (bitwise resume), and
every process samples the same global batch and keeps its own rows (sharded == unsharded).
The validation split is still sampled once (``data.options.val_tokens``), as for a stored stream.
"""

from __future__ import annotations

import numpy as np

STREAM_TAG = 3  # the stored streams use 1 (train) and 2 (validation) in the same seed slot


def global_train_batch(lang, planted_seed: int, data_seed: int, i: int, batch: int,
                       seq_len: int) -> np.ndarray:
  """int32 [batch, seq_len + 1]: global train batch ``i`` (module doc)."""
  if i < 0:
    raise ValueError(f"batch index must be >= 0, got {i}")
  rng = np.random.default_rng([int(planted_seed), STREAM_TAG, int(data_seed), int(i)])
  return lang.sample(rng, (int(batch), int(seq_len) + 1))
