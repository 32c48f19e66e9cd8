"""The probe batches of the convergence experiment (issue 33, item 6).

CKA-to-final is measured on a fixed batch of n validation windows (probe 0, the authors'
protocol and every earlier run's batch) and on further batches of n windows disjoint from it
(probe 1, ...), so a layer's stabilisation step can be compared between batches: a step that
moves with the batch is a property of the batch, not of the layer.

* ``probe_batches(ds, n, k)``: probe 0 = ``samples.eval_sample(ds, n)``; probe j >= 1 = the
  next n windows of ``eval_sample(ds, k n)`` (windows spread evenly over the validation split)
  whose tokens are in no earlier probe, so the probes are disjoint and drawn from the whole
  split. When the split holds fewer than k n windows, fewer probes (the run records how many).
* ``split_rows(batch, n, k)``: the probes of a token file (``--series``): rows
  [j n, (j + 1) n) for as many j < k as the file holds.
"""

from __future__ import annotations

import logging

import numpy as np

from sbjax.analysis import samples

log = logging.getLogger("sbjax")


def _check(n: int, k: int) -> None:
  if not isinstance(k, int) or k < 1:
    raise ValueError(f"probe_batches={k!r}: give an integer >= 1 (1 = the fixed batch only)")
  if not isinstance(n, int) or n < 1:
    raise ValueError(f"n_sequences={n!r}: give an integer >= 1")


def probe_batches(ds, n: int, k: int) -> list[np.ndarray]:
  """Up to k disjoint int32 [n, T+1] batches of validation windows (see the module doc)."""
  _check(n, k)
  probes = [samples.eval_sample(ds, n)]
  n_val = getattr(ds, "n_val_windows", None)
  fit = k if n_val is None else min(k, int(n_val) // n)
  if fit > 1:
    seen = {r.tobytes() for r in probes[0]}
    pool = [r for r in samples.eval_sample(ds, fit * n) if r.tobytes() not in seen]
    probes += [np.stack(pool[j * n:(j + 1) * n]) for j in range(min(fit - 1, len(pool) // n))]
  if len(probes) < k:
    log.warning("the validation split holds %s windows: %d disjoint probe batch(es) of %d "
                "sequences instead of %d", n_val, len(probes), n, k)
  return probes


def split_rows(batch: np.ndarray, n: int, k: int) -> list[np.ndarray]:
  """The probes of a token file: rows [j n, (j + 1) n) for j < k while the file has them."""
  _check(n, k)
  batch = np.asarray(batch)
  return [batch[j * n:(j + 1) * n] for j in range(k) if batch.shape[0] >= (j + 1) * n] or \
      [batch]  # fewer rows than n: measure_one names the shortfall
