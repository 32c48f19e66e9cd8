"""The exact Fig. 8 on cached floors: the target W-error variants of
``sbjax.studies.target_werror`` against numpy on a small planted language (analytic ranks:
raw ≤ k + 2, centred = k + 1)."""

import math

import numpy as np
import pytest

from sbjax.data.planted import PlantedLanguage
from sbjax.studies import target_werror as T


@pytest.fixture(scope="module")
def lang():
  return PlantedLanguage(vocab=32, rank=3, alpha=4.0, seed=0)


def test_variants_against_numpy(lang):
  lp, pi = lang.log_probs, lang.stationary
  mats = T.target_matrices(lp, pi)
  cen = lp - lp.mean(1, keepdims=True)
  np.testing.assert_allclose(mats["centred"], cen)
  np.testing.assert_allclose(mats["weighted"], np.sqrt(pi)[:, None] * cen)
  for name, a in mats.items():
    s = np.linalg.svd(a, compute_uv=False)
    want = [math.sqrt(np.sum(s[r:] ** 2)) / np.linalg.norm(a) for r in (0, 1, 2, 5)]
    np.testing.assert_allclose(T.werror(a, [0, 1, 2, 5]), want, atol=1e-12)
  we = T.language_werror(lang, range(0, 7))
  k = lang.rank
  # centred targets have rank k + 1 (planted dims + bias): W-error 0 from r = k + 1 on, > 0 before
  assert we["centred"][k + 1] < 1e-12 and we["weighted"][k + 1] < 1e-12 and we["centred"][k] > 1e-3
  # the raw target carries the per-row log Z too: not yet 0 at k + 1, 0 at k + 2
  assert we["raw"][k + 1] > 1e-6 and we["raw"][k + 2] < 1e-12
  assert we["raw"][0] == we["centred"][0] == 1.0


def test_model_werror_of_the_exact_model_is_the_target(lang):
  """A model that predicts log P exactly has the target's W-errors; context_means is the
  per-context mean (numpy loop), unseen contexts are dropped with their π renormalised."""
  rng = np.random.default_rng(3)
  c = rng.integers(-1, lang.n_contexts, 4000)  # -1: no full context, skipped
  noise = rng.normal(size=(c.size, lang.vocab))
  lq = np.where((c >= 0)[:, None], lang.log_probs[np.maximum(c, 0)], 0.0) + noise
  means, counts = T.context_means(lq, c, lang.n_contexts)
  for j in (0, 5, lang.n_contexts - 1):
    np.testing.assert_allclose(means[j], lq[c == j].mean(0), atol=1e-12)
    assert counts[j] == np.sum(c == j)
  exact, n = T.context_means(lang.log_probs[np.maximum(c, 0)], c, lang.n_contexts)
  got = T.model_werror(exact, n, lang.stationary, range(6))
  want = T.language_werror(lang, range(6))
  for v in T.VARIANTS:
    np.testing.assert_allclose(got[v], want[v], atol=1e-10)
  # two contexts never seen: their rows are NaN and left out, π renormalised over the rest
  keep = (c != 1) & (c != 4)
  m2, n2 = T.context_means(lang.log_probs[np.maximum(c[keep], 0)], c[keep], lang.n_contexts)
  assert n2[1] == n2[4] == 0 and np.isnan(m2[1]).all()
  seen = np.setdiff1d(np.arange(lang.n_contexts), [1, 4])
  a = T.target_matrices(lang.log_probs[seen], lang.stationary[seen])["weighted"]
  np.testing.assert_allclose(T.model_werror(m2, n2, lang.stationary, [2])["weighted"],
                             T.werror(a, [2]), atol=1e-12)
  with pytest.raises(ValueError, match="1 context"):
    T.model_werror(m2, (np.arange(lang.n_contexts) == 0).astype(int), lang.stationary, [1])
