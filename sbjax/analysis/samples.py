"""The fixed samples of an analysis (see the module docstring of ``sbjax.analysis.analyze``)."""

from __future__ import annotations

import numpy as np


def _batch_rows(ds) -> int:
  b = getattr(ds, "batch_size", None)
  return int(b) if b else int(np.asarray(ds.eval_batches(1)[0]).shape[0])


def eval_sample(ds, n: int) -> np.ndarray:
  """First n validation windows of concat(ds.eval_batches(ceil(n / B))), int32 [n, T+1]."""
  b = _batch_rows(ds)
  arr = np.concatenate([np.asarray(x) for x in ds.eval_batches(-(-n // b))])[:n]
  if arr.shape[0] < n:
    raise ValueError(f"the dataset gave {arr.shape[0]} validation windows, fewer than {n}")
  return arr.astype(np.int32)


def train_sample(ds, n: int) -> np.ndarray:
  """First n windows of concat(ds.train_batch(0), ds.train_batch(1), ...), int32 [n, T+1]."""
  out, have, i = [], 0, 0
  while have < n:
    x = np.asarray(ds.train_batch(i))
    out.append(x)
    have += x.shape[0]
    i += 1
  return np.concatenate(out)[:n].astype(np.int32)


def anisotropy_positions(n_positions: int, n: int, seed: int) -> np.ndarray:
  """Sorted flat positions of the eval grid used for anisotropy (all for n=0 or n >= total)."""
  if n == 0 or n >= n_positions:
    return np.arange(n_positions)
  return np.sort(np.random.default_rng(seed).choice(n_positions, size=n, replace=False))


def open_dataset(cfg, workdir):
  from sbjax.data import make_dataset  # noqa: PLC0415 - heavy, only when data is needed

  tc = cfg.train
  return make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(workdir), process_index=0, process_count=1)
