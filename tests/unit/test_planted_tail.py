"""The rare-token tail language (sbjax.data.planted_tail, ``source=planted_tail``) at test size:
the same language as PlantedMixture of its parameters; its entropy rate against a direct
numpy computation (explicit softmaxes, the stationary law from a linear solve) and against the
mean log-loss of a long sample; its rank floors (floor >= H, non-increasing, = H at full rank,
above H at k + 1); the expected count of its rarest token against an empirical count."""

import jax
import numpy as np
import pytest

from sbjax.config import DataConfig
from sbjax.data import make_dataset
from sbjax.data import planted_device as pdev
from sbjax.data import planted_tail as pt
from sbjax.data.planted import PlantedMixture
from sbjax.studies import floor as fl

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


def test_the_same_language_as_the_planted_mixture(tail):
  mix = PlantedMixture(**KW)
  np.testing.assert_allclose(tail.log_probs, mix.log_probs, rtol=0, atol=1e-12)
  np.testing.assert_allclose(tail.stationary, mix.stationary, rtol=0, atol=1e-12)
  assert abs(tail.entropy - mix.entropy) < 1e-12
  assert tail.info()["kind"] == "planted_tail" and tail.info()["n_mix"] == 3


def test_entropy_against_a_direct_numpy_computation(tail):
  P, pi, h = direct(KW)
  np.testing.assert_allclose(tail.probs, P, rtol=1e-10, atol=0)
  np.testing.assert_allclose(tail.stationary, pi, rtol=0, atol=1e-12)
  assert abs(tail.entropy - h) < 1e-12
  x = tail.sample(np.random.default_rng(0), 400_000)  # the entropy rate is the mean log-loss
  lp = tail.sequence_log_probs(x)
  assert abs(-lp.mean() - h) < 4 * lp.std() / np.sqrt(len(lp) / 20), (-lp.mean(), h)


def test_rank_floors_at_test_size(tail):
  res = fl.floor_curve(tail, [1, 3, tail.vocab])
  vals = [r.value for r in res]
  assert all(v >= tail.entropy - 1e-12 for v in vals)  # Gibbs: no head beats H
  assert all(b <= a + 1e-12 for a, b in zip(vals, vals[1:]))
  assert abs(vals[-1] - tail.entropy) < 1e-9  # full rank reaches H
  assert vals[1] > tail.entropy + 1e-3  # a mixture needs more than rank k + 1 = 3


def test_expected_count_of_the_rarest_token_against_an_empirical_count(tail):
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
  counts = np.bincount(tokens.ravel(), minlength=12)
  np.testing.assert_allclose(counts / n, pt.expected_counts(ds.planted, n) / n, atol=0.01)
  assert pt.types_below(ds.planted, n, count=rare["expected_count"] + 1) >= 1
  assert pt.types_below(ds.planted, n, count=rare["expected_count"] - 1) == 0


def test_the_source_and_its_defaults():
  o = DataConfig("planted_tail").options
  assert (o.vocab, o.rank, o.mix, o.zipf, o.sampler) == (4096, 32, 8, 1.5, "host")
  assert o.language_kwargs()["n_mix"] == 8
  with pytest.raises(NotImplementedError, match="PlantedMixture"):
    pt.PlantedTail(**KW).component_logits()
