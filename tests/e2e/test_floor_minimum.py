"""The exact floor is a minimum on the main job's language (the planted language of
``reproduce --quick``: V = 256, k = 8, α = 4): at every rank r ≤ 16, floor(r) ≤ the value an
independent Adam fit of X·Yᵀ from a random start reaches (+1e-4), every best fit converged to
its tolerance, and the curve is non-increasing. r = 2 is the case where the former one-start
fit reported 1.3428 against Adam's ≈ 1.302. From r = k + 1 = 9 on floor = H, which no fit can
go below (Gibbs), so Adam runs on ranks 1..8 only.

Slow: the multi-start floor curve took 458 s alone and 1128 s (+ 43 s of Adam) among other
jobs on the shared 2-core machine, far over the suite's e2e budget, so it runs only with
SBJAX_SLOW_TESTS=1 (it passed so, session 7). The always-on check is r = 2 of the same
language in the fast layer (tests/unit/test_planted.py)."""

import os

import pytest

from sbjax.data.planted import PlantedLanguage
from sbjax.studies import floor as fl
from sbjax.studies.blas_threads import single_thread_blas
from tests._adam_reference import adam_fit


pytestmark = pytest.mark.skipif(os.environ.get("SBJAX_SLOW_TESTS") != "1",
                                reason="~8-20 min on 2 CPU cores: set SBJAX_SLOW_TESTS=1 to run")


@pytest.fixture(scope="module")
def main():
  return PlantedLanguage(vocab=256, rank=8, alpha=4.0, zipf=1.0, seed=0)


@pytest.fixture(scope="module")
def curve(main):
  return fl.floor_curve(main, range(1, 17), max_iter=3000, restarts=2)  # raises if unconverged


def test_floor_is_below_independent_adam_at_every_rank_up_to_16(main, curve):
  h = main.entropy
  vals = [r.value for r in curve]
  assert [r.rank for r in curve] == list(range(1, 17))
  assert all(b <= a + 1e-12 for a, b in zip(vals, vals[1:])), vals
  for res in curve:
    assert res.converged and res.value >= h - 1e-10
    if res.rank >= 9:
      assert res.gap <= 1e-9, res
      continue
    assert res.gap > 1e-3 and len(res.starts) >= 6  # svd, warm or down, 4 random
    with single_thread_blas():
      adam = adam_fit(main.probs, main.stationary, res.rank, seed=0, steps=2000)
    assert res.value <= adam + 1e-4, (res.rank, res.gap, adam - h)
  assert curve[1].gap < 1.3428 - 0.03  # the former one-start value at r = 2
