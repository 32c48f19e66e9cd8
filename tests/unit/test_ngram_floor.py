"""Exact n-gram floors scored on validation counts (sbjax.studies.ngram_floor), against a
plain-Python counting reference on a tiny stream."""

import math
from collections import Counter

import numpy as np
import pytest

from sbjax.studies import ngram_floor as nf

V = 6


def _stream(seed, n):
  rng = np.random.default_rng(seed)
  x = [0]
  for _ in range(n - 1):  # a Markov chain with a strong preference: x -> x+1 or 0
    x.append((x[-1] + 1) % V if rng.random() < 0.7 else int(rng.integers(V)))
  return np.array(x, np.int64)


def test_smoothed_validation_and_floor_rows():
  tr, va = _stream(0, 3000), _stream(1, 1000)
  k = 0.5
  p, pi, ctx = nf.smoothed(tr, V, n=1, add_k=k)
  pairs = Counter(zip(tr[:-1].tolist(), tr[1:].tolist()))
  nc = Counter(tr[:-1].tolist())
  for i, (c,) in enumerate(ctx.tolist()):
    assert pi[i] == pytest.approx(nc[c] / (len(tr) - 1))
    for v in range(V):
      assert p[i, v] == pytest.approx((pairs[(c, v)] + k) / (nc[c] + k * V))
  vpairs = Counter(zip(va[:-1].tolist(), va[1:].tolist()))
  row = {c: i for i, (c,) in enumerate(ctx.tolist())}
  full = -sum(cnt * math.log(p[row[c], v]) for (c, v), cnt in vpairs.items()) / (len(va) - 1)
  rows = nf.ngram_floor_rows(tr, va, V, [1, 2, V], n=1, add_k=k)
  assert [r["rank"] for r in rows] == [1, 2, V]
  assert rows[0]["val_full"] == pytest.approx(full, rel=1e-10)
  assert rows[0]["coverage"] == 1.0
  assert rows[-1]["train_floor"] == pytest.approx(rows[-1]["train_H"], abs=1e-9)
  assert rows[-1]["val_excess"] == pytest.approx(0.0, abs=1e-6)  # full rank: the smoothed model
  assert rows[0]["val_excess"] > rows[1]["val_excess"] - 1e-9 and rows[0]["val_excess"] > 0.05
  assert nf.r_star(rows, 1e-3) in (2, V) and nf.r_star(rows[:1], 1e-6) is None
  with pytest.raises(ValueError, match="add_k must be > 0"):
    nf.smoothed(tr, V, add_k=0)

