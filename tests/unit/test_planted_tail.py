"""The rare-token tail language (sbjax.data.planted_tail, ``source=planted_tail``) at test size:
the same language as PlantedMixture of its parameters; its entropy rate against a direct
numpy computation (explicit softmaxes, the stationary law from a linear solve) and against the
mean log-loss of a long sample; the expected count of its rarest token against an empirical
count of the device sampler's tokens."""

import jax
import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import make_dataset
from sbjax.data import planted_device as pdev
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


def test_expected_count_of_the_rarest_token_against_an_empirical_count():
  ds = make_dataset(DataConfig("planted_tail", dict(
      vocab=12, rank=2, zipf=1.5, mix=3, seed=3, train_tokens=0, val_tokens=2000,
      sampler="device")), seq_len=64, global_batch_size=16, workdir=None)
  t = ds.device_tables()  # the device sampler's training tokens: 2048 chains of 65
  tokens = np.asarray(jax.jit(lambda: pdev.train_batch(t, 0, 2048, 64, 1))())
  n = tokens.size
  rare = pt.rarest_token(ds.planted, n)
  q = pt.token_marginal(ds.planted)
  assert rare["token"] == int(np.argmin(q)) and abs(q.sum() - 1) < 1e-12
  assert rare["expected_count"] == pytest.approx(n * q.min(), rel=1e-12)
  seen = int(np.sum(tokens == rare["token"]))
  assert 100 < rare["expected_count"] < 2000  # a count the check can resolve
  # the positions of a chain are correlated: 6 Poisson sigmas is a loose but failing bound
  assert abs(seen - rare["expected_count"]) < 6 * np.sqrt(rare["expected_count"]), (seen, rare)
  np.testing.assert_allclose(np.bincount(tokens.ravel(), minlength=12) / n, q, atol=0.01)
