"""The rare-token tail language (sbjax.data.planted_tail, ``source=planted_tail``) at test size:
the same language as PlantedMixture of its parameters; its entropy rate against a direct
numpy computation (explicit softmaxes, the stationary law from a linear solve) and against the
mean log-loss of a long sample; its rarest token and that token's expected count."""

import numpy as np
import pytest

from sbjax.data import planted_tail as pt
from sbjax.data.planted import PlantedMixture

KW = dict(vocab=12, rank=2, alpha=4.0, zipf=1.5, n_mix=3, seed=3)


@pytest.fixture(scope="module")
def tail():
  return pt.PlantedTail(**KW)


def direct(kw):
  """(P, π, H) computed from scratch: every softmax written out, π from (Pᵀ − I) π = 0."""
  mix = PlantedMixture(**kw)  # only its random draws (U, V, gate) are read
  V, M, k = kw["vocab"], kw["n_mix"], kw["rank"]
  b = -kw["zipf"] * np.log(np.arange(1, V + 1))
  P = np.zeros((V, V))
  for c in range(V):
    g = np.exp(mix.gate[c]) / np.exp(mix.gate[c]).sum()
    for m in range(M):
      z = np.exp(kw["alpha"] * mix.U[m, c] @ mix.V[m].T / np.sqrt(k) + b)
      P[c] += g[m] * z / z.sum()
  A = np.vstack([P.T - np.eye(V), np.ones(V)])
  pi = np.linalg.lstsq(A, np.append(np.zeros(V), 1.0), rcond=None)[0]
  return P, pi, float(-(pi[:, None] * P * np.log(P)).sum())


def test_the_planted_mixture_and_its_entropy_computed_directly(tail):
  mix = PlantedMixture(**KW)
  np.testing.assert_allclose(tail.log_probs, mix.log_probs, rtol=0, atol=1e-12)
  np.testing.assert_allclose(tail.stationary, mix.stationary, rtol=0, atol=1e-12)
  assert tail.info()["kind"] == "planted_tail" and tail.info()["n_mix"] == 3
  P, pi, h = direct(KW)
  np.testing.assert_allclose(tail.probs, P, rtol=1e-10, atol=0)
  np.testing.assert_allclose(tail.stationary, pi, rtol=0, atol=1e-12)
  assert abs(tail.entropy - h) < 1e-12
  x = tail.sample(np.random.default_rng(0), 400_000)  # the entropy rate is the mean log-loss
  lp = tail.sequence_log_probs(x)
  assert abs(-lp.mean() - h) < 4 * lp.std() / np.sqrt(len(lp) / 20), (-lp.mean(), h)


def test_the_rarest_token_is_the_least_likely_in_the_stationary_marginal(tail):
  """(That the positions of a planted batch have the stationary token marginal: the sampler
  tests, test_data_planted and test_planted_device.)"""
  q = pt.token_marginal(tail)
  np.testing.assert_allclose(q, tail.stationary, rtol=1e-12)  # context = the last token
  rare = pt.rarest_token(tail, 10_000)
  assert rare["token"] == int(np.argmin(q)) and rare["probability"] == q.min()
  assert rare["expected_count"] == pytest.approx(10_000 * q.min(), rel=1e-12)
  assert rare["p_absent_poisson"] == pytest.approx(np.exp(-rare["expected_count"]), rel=1e-12)
