"""The pieces of the bigram r*(V, N) study (issue 33, item 3): the galloping r* search against
a brute-force scan, the nested data fractions, and the gradient-stopped rank-r fit against
Gibbs' bound (a full-rank fit reaches the entropy H) and an independent finite-difference
gradient."""

import numpy as np
import pytest

from experiments.vocab_threshold.bigram_n import BigramNKnobs, fraction_streams
from sbjax.studies import bigram_fit as bf
from sbjax.studies.bigram_rstar import gallop

GRID = (2, 4, 8, 16, 32)


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


def test_gallop_rejects_a_bad_grid():
  with pytest.raises(ValueError, match="integers >= 1"):
    gallop(lambda r: True, (0, 2), 2)


def test_fractions_are_nested_blocks_spread_over_the_stream():
  tok = np.arange(10_000)
  parts = {f: fraction_streams(tok, f, period=4, block=100) for f in (0.25, 0.5, 1.0)}
  assert np.array_equal(np.concatenate(parts[1.0]), tok)
  sizes = {f: sum(len(s) for s in p) for f, p in parts.items()}
  assert sizes == {0.25: 2500, 0.5: 5000, 1.0: 10_000}
  starts = {f: {int(s[0]) for s in p} for f, p in parts.items()}
  assert starts[0.25] < starts[0.5] < starts[1.0]  # nested
  assert max(starts[0.25]) >= 9000  # reaches the end of the stream
  with pytest.raises(ValueError, match="not k/4"):
    BigramNKnobs(fractions=(0.3,), grid=(2,), max_iters=(1,))
  with pytest.raises(ValueError, match="check=3 must be 0 \\(off\\)"):
    BigramNKnobs(fractions=(0.5,), grid=(2,), max_iters=(1,), check=3)
  with pytest.raises(ValueError, match="check_cap=0.5 must be >= 1"):
    BigramNKnobs(fractions=(0.5,), grid=(2,), max_iters=(1,), check_cap=0.5)


def _problem(seed=0, C=7, V=6):
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.ones(V), size=C)
  pi = rng.dirichlet(np.ones(C))
  return p, pi


def test_full_rank_fit_reaches_the_entropy_and_records_convergence():
  p, pi = _problem()
  h = -float(pi @ (p * np.log(p)).sum(1))  # Gibbs: floor(min(C, V)) = H
  name, x, y = bf.start_for(p, pi, 6, {})
  res = bf.fit(p, pi, x, y, gtol=1e-8, max_iter=5000, start=name)
  assert name == "svd" and res.converged and res.grad_norm <= 1e-8
  assert res.value == pytest.approx(h, abs=1e-9)
  short = bf.fit(p, pi, *bf.start_for(p, pi, 2, {})[1:], gtol=1e-12, max_iter=3)
  assert not short.converged and short.n_iter <= 3 and short.grad_norm > 1e-12
  with pytest.raises(ValueError, match="max_iter >= 1"):
    bf.fit(p, pi, x, y, max_iter=0)


def test_rank_one_fit_is_stationary_by_finite_differences():
  p, pi = _problem(1)
  name, x, y = bf.start_for(p, pi, 1, {})
  res = bf.fit(p, pi, x, y, gtol=1e-9, max_iter=5000)
  assert res.converged

  def f(X, Y):
    L = X @ Y.T
    lse = np.log(np.exp(L).sum(1))
    return float(pi @ (lse - (p * L).sum(1)))

  assert f(res.X, res.Y) == pytest.approx(res.value, abs=1e-12)
  eps = 1e-6
  for M in (res.X, res.Y):  # every partial derivative vanishes at a stationary point
    for idx in np.ndindex(M.shape):
      M[idx] += eps
      up = f(res.X, res.Y)
      M[idx] -= 2 * eps
      dn = f(res.X, res.Y)
      M[idx] += eps
      assert abs(up - dn) / (2 * eps) < 1e-7


def test_starts_prefer_the_same_rank_then_the_nearest_rank():
  p, pi = _problem(2)
  fits = {r: bf.fit(p, pi, *bf.start_for(p, pi, r, {})[1:], max_iter=50) for r in (1, 4)}
  assert bf.start_for(p, pi, 2, fits)[0] == "pad1"
  assert bf.start_for(p, pi, 3, fits)[0] == "truncate4"
  assert bf.start_for(p, pi, 4, fits)[0] == "refit"
  prior = fits[4]
  assert bf.start_for(p, pi, 4, fits, prior)[0] == "prior"
  moved = bf.map_contexts(np.arange(6.0).reshape(3, 2), np.array([[5], [7], [9]]),
                          np.array([[9], [1], [5]]))
  assert np.array_equal(moved, [[4, 5], [0, 0], [0, 1]])
