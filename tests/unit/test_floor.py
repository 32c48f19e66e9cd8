"""The exact rank floor (sbjax.studies.floor) and the planted experiment's pieces.

References are written plainly here: the stationary distribution by an eigenvector, the
entropy and the cross-entropy by their definitions, and an independent Adam optimiser on the
factors (the floor is a minimum, so no other rank-r matrix may beat it)."""

import math

import numpy as np
import pytest

from experiments.planted import measure as exp
from sbjax.studies import floor as fl
from sbjax.data.planted import PlantedLanguage
from sbjax.studies.floor import single_thread_blas
from tests._adam_reference import adam_fit, xent

K = 3
V = 16


def _stationary(p):
  w, vecs = np.linalg.eig(p.T)
  v = np.real(vecs[:, np.argmin(np.abs(w - 1))])
  return v / v.sum()


def _entropy(p, pi):
  return float(-sum(pi[c] * sum(q * math.log(q) for q in p[c] if q > 0) for c in range(len(p))))


@pytest.fixture(scope="module")
def lang():
  return PlantedLanguage(vocab=V, rank=K, alpha=3.0, zipf=1.0, seed=2)


@pytest.fixture(scope="module")
def curve(lang):
  return fl.floor_curve(lang, range(1, V + 1), gtol=1e-8)


def test_floor_equals_entropy_from_k_plus_1(lang, curve):
  h = _entropy(lang.probs, _stationary(lang.probs))
  for res in curve:
    assert res.converged and res.grad_norm <= 1e-8 or res.gap <= 1e-12
    assert res.value >= h - 1e-10  # Gibbs
    if res.rank >= K + 1:
      assert abs(res.value - h) < 1e-9, res
    else:
      assert res.value > h + 1e-3, res  # a planted rank-(k+1) matrix is not rank-k
  assert abs(curve[-1].value - h) < 1e-10  # floor(V) = H


def test_floor_is_non_increasing_and_consistent(lang, curve):
  vals = [r.value for r in curve]
  assert all(b <= a + 1e-12 for a, b in zip(vals, vals[1:])), vals
  pi = _stationary(lang.probs)
  for res in curve:
    assert res.X.shape == (V, res.rank) and res.Y.shape == (V, res.rank)
    assert abs(xent(res.X @ res.Y.T, lang.probs, pi) - res.value) < 1e-9
    # stationarity, checked with the plain gradient G = diag(pi)(softmax(L) - P)
    L = res.X @ res.Y.T
    q = np.exp(L - L.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    g = pi[:, None] * (q - lang.probs)
    assert np.linalg.norm(g @ res.Y) < 1e-6 and np.linalg.norm(g.T @ res.X) < 1e-6


def test_floor_records_every_start(lang, curve):
  """Below rank k+1: svd, warm and 4 random starts at least, their spread; from k+1 on the
  SVD start reaches H (the global minimum) and no other start runs."""
  for res in curve:
    names = [s.name for s in res.starts]
    vals = [s.value for s in res.starts]
    assert res.value == min(vals) and res.start == names[vals.index(min(vals))]
    assert res.spread == pytest.approx(max(vals) - min(vals)) and res.spread >= 0
    assert res.row()["n_starts"] == len(names)
    if res.rank >= K + 1:
      assert names == ["svd"], names
    else:
      assert {"svd", "random0", "random1", "random2", "random3"} <= set(names), names
      assert res.rank == 1 or "warm" in names


def test_main_language_rank_2_floor_is_below_adam():
  """The main job's language (V=256, k=8): the one-start SVD fit stopped at floor(2) − H =
  1.3428 where Adam from a random start reaches ≈ 1.302; the multi-start floor must not be
  above an independent Adam fit (all ranks <= 16: benchmarks/floor_vs_adam.py)."""
  main = PlantedLanguage(vocab=256, rank=8, alpha=4.0, zipf=1.0, seed=0)
  res = fl.floor_curve(main, [2], max_iter=3000, restarts=2)[0]
  with single_thread_blas():
    adam = adam_fit(main.probs, main.stationary, 2, seed=0, steps=2000)
  assert res.converged and res.value <= adam + 1e-4, (res.gap, adam - main.entropy)
  assert res.gap < 1.3428 - 0.03


def test_floor_analytic_no_context_dependence():
  """alpha = 0: P(.|c) = softmax(b) for every c, so floor(1) = H = entropy(softmax(b))."""
  lang0 = PlantedLanguage(vocab=12, rank=2, alpha=0.0, zipf=1.3, seed=0)
  b = -1.3 * np.log(np.arange(1, 13))
  q = np.exp(b) / np.exp(b).sum()
  h = float(-(q * np.log(q)).sum())
  res = fl.rank_floor(lang0, 1)
  assert abs(res.value - h) < 1e-10 and abs(res.entropy - h) < 1e-12


def test_knee():
  assert fl.knee([1, 2, 4, 8], [3.0, 2.2, 2.04, 2.01], 2.0, 0.05) == 4
  assert fl.knee([1, 2], [3.0, 2.2], 2.0, 0.05) is None


def test_expected_nll_and_context_index():
  lang2 = PlantedLanguage(vocab=5, rank=2, context=2, seed=0)
  x = lang2.sample(0, (3, 7))
  c = exp.context_index(x, 2, 5)
  for b in range(3):
    assert c[b, 0] == -1
    for t in range(1, 7):
      assert c[b, t] == x[b, t - 1] * 5 + x[b, t]
  # a perfect model: the expected NLL is the mean conditional entropy of the visited contexts
  logq = np.where(c[..., None] >= 0, lang2.log_probs[np.maximum(c, 0)], 0.0)
  s, n = exp.expected_nll_sum(logq, x, lang2)
  ent = [-(lang2.probs[ci] * np.log(lang2.probs[ci])).sum() for ci in c[c >= 0]]
  assert n == 18 and abs(s / n - np.mean(ent)) < 1e-12
