"""Independent references for n-gram target matrices: pure Python counting and numpy SVD."""

import collections

import numpy as np


def counter_reference(streams, n, min_count):
  """(pair counts {(context, next): k}, context counts {context: k}) of contexts seen at
  least ``min_count`` times, counted with collections.Counter within each stream."""
  pairs, ctx = collections.Counter(), collections.Counter()
  for s in streams:
    s = [int(x) for x in s]
    for t in range(n, len(s)):
      c = tuple(s[t - n:t])
      pairs[(c, s[t])] += 1
      ctx[c] += 1
  kept = {c: k for c, k in ctx.items() if k >= min_count}
  return {(c, v): k for (c, v), k in pairs.items() if c in kept}, kept


def np_w_error(m, dims):
  """W-error(d) = ||sigma_{d+1:}||_2 / ||M||_F of a dense matrix, by numpy's SVD."""
  s = np.linalg.svd(m, compute_uv=False)
  f2 = float((m ** 2).sum())
  return np.array([np.sqrt((s[min(d, s.size):] ** 2).sum() / f2) for d in dims])
