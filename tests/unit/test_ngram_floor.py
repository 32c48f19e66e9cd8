"""Exact n-gram floors scored on validation counts (sbjax.studies.ngram_floor) against a
plain-Python counting reference; the gradient-stopped rank-r bigram fit (sbjax.studies.bigram_fit)
against Gibbs' bound (a full-rank fit reaches the entropy H); the
galloping r* search (sbjax.studies.bigram_rstar) against a brute-force scan."""

import math
from collections import Counter

import numpy as np
import pytest

from sbjax.studies import bigram_fit as bf
from sbjax.studies import ngram_floor as nf
from sbjax.studies.bigram_rstar import gallop

V = 6
GRID = (2, 4, 8, 16, 32)


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
  rows = nf.ngram_floor_rows(tr, va, V, [1, 2, V], n=1, add_k=k, max_iter=500, gtol=1e-9)
  assert [r["rank"] for r in rows] == [1, 2, V]
  assert rows[0]["val_full"] == pytest.approx(full, rel=1e-10)
  assert rows[0]["coverage"] == 1.0
  assert rows[-1]["train_floor"] == pytest.approx(rows[-1]["train_H"], abs=1e-9)
  assert rows[-1]["val_excess"] == pytest.approx(0.0, abs=1e-6)  # full rank: the smoothed model
  assert rows[0]["val_excess"] > rows[1]["val_excess"] - 1e-9 and rows[0]["val_excess"] > 0.05
  assert nf.r_star(rows, 1e-3) in (2, V) and nf.r_star(rows[:1], 1e-6) is None


def _problem(seed=0, C=7, V=6):
  rng = np.random.default_rng(seed)
  return rng.dirichlet(np.ones(V), size=C), rng.dirichlet(np.ones(C))


def test_full_rank_fit_reaches_the_entropy_and_records_convergence():
  p, pi = _problem()
  h = -float(pi @ (p * np.log(p)).sum(1))  # Gibbs: floor(min(C, V)) = H
  name, x, y = bf.start_for(p, pi, 6, {})
  res = bf.fit(p, pi, x, y, gtol=1e-8, max_iter=5000, start=name)
  assert name == "svd" and res.converged and res.grad_norm <= 1e-8
  assert res.value == pytest.approx(h, abs=1e-9)
  short = bf.fit(p, pi, *bf.start_for(p, pi, 2, {})[1:], gtol=1e-12, max_iter=3)
  assert not short.converged and short.n_iter <= 3 and short.grad_norm > 1e-12


def test_starts_prefer_the_same_rank_then_the_nearest_rank():
  p, pi = _problem(2)
  fits = {r: bf.fit(p, pi, *bf.start_for(p, pi, r, {})[1:], max_iter=50) for r in (1, 4)}
  assert bf.start_for(p, pi, 2, fits)[0] == "pad1"
  assert bf.start_for(p, pi, 3, fits)[0] == "truncate4"
  assert bf.start_for(p, pi, 4, fits)[0] == "refit"
  assert bf.start_for(p, pi, 4, fits, fits[4])[0] == "prior"
  moved = bf.map_contexts(np.arange(6.0).reshape(3, 2), np.array([[5], [7], [9]]),
                          np.array([[9], [1], [5]]))
  assert np.array_equal(moved, [[4, 5], [0, 0], [0, 1]])


@pytest.mark.parametrize("t", [1, 2, 3, 8, 9, 32, 33])
@pytest.mark.parametrize("guess", [2, 7, 16, 100])
def test_gallop_finds_the_scan_answer_with_few_fits(t, guess):
  calls = []

  def ok(r):
    calls.append(r)
    return r >= t

  s = gallop(ok, GRID, guess)
  scan = [r for r in GRID if r >= t]
  assert s.r_star == (scan[0] if scan else None) and s.censored == (not scan)
  if scan:
    i = GRID.index(scan[0])
    assert s.lo == (GRID[i - 1] if i else 0)
    assert s.lo in calls or s.lo == 0  # the failing rank below was evaluated
  assert len(calls) == len(set(calls)) == len(s.evaluated)
  start = min(GRID, key=lambda r: (abs(r - guess), r))
  steps = abs(GRID.index(start) - GRID.index(scan[0] if scan else GRID[-1]))
  assert len(calls) <= steps + 2
