"""Planted-rank languages: exact distributions, stationarity, entropy, rank (the same seed, the
same language: test_data_planted_streams)."""

import numpy as np
import pytest

from sbjax.data.planted import PlantedLanguage, PlantedMixture, numerical_rank


@pytest.fixture(scope="module")
def lang():
  return PlantedLanguage(vocab=64, rank=6, alpha=4.0, zipf=1.0, seed=3)


@pytest.fixture(scope="module")
def mix():
  return PlantedMixture(vocab=64, rank=6, alpha=4.0, zipf=1.0, n_mix=4, seed=3)


@pytest.fixture(scope="module")
def lang2():
  return PlantedLanguage(vocab=12, rank=3, alpha=3.0, zipf=0.5, context=2, seed=1)


ALL = ["lang", "mix", "lang2"]


@pytest.mark.parametrize("name", ALL)
def test_rows_are_distributions_and_stationary_is_stationary(name, request):
  p = request.getfixturevalue(name)
  assert p.log_probs.dtype == np.float64 and p.log_probs.shape == (p.n_contexts, p.vocab)
  assert np.allclose(p.probs.sum(1), 1.0, atol=1e-12) and np.all(p.probs > 0)
  assert np.allclose(np.exp(p.log_probs), p.probs, rtol=1e-12)
  pi = p.stationary
  assert pi.shape == (p.n_contexts,) and np.all(pi >= 0) and abs(pi.sum() - 1) < 1e-12
  assert np.abs(p.transition(pi) - pi).sum() < 1e-10
  if p.context == 1:  # explicit: pi P = pi for the first-order chain
    assert np.allclose(pi @ p.probs, pi, atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_empirical_entropy_matches_exact(name, request):
  """The sample's mean -log P(x_t | context) estimates the entropy rate H.

  Tolerance: 5 standard errors, the standard error estimated from 40 batch means (which
  accounts for the chain's autocorrelation); it is asserted to be small so the test has teeth.
  """
  p = request.getfixturevalue(name)
  x = p.sample(np.random.default_rng(7), (4, 50_000))
  nll = -np.stack([p.sequence_log_probs(row) for row in x]).reshape(-1)
  means = nll[: len(nll) // 40 * 40].reshape(40, -1).mean(1)
  se = means.std(ddof=1) / np.sqrt(len(means))
  assert se < 0.02
  assert abs(nll.mean() - p.entropy) < 5 * se + 1e-3, (nll.mean(), p.entropy, se)
  # and H is the pi-weighted row entropy, within the trivial bounds
  assert 0 < p.entropy < np.log(p.vocab)


def test_sample_starts_stationary_and_stream_shape(lang):
  first = lang.sample(0, (20_000, 1))[:, 0]
  emp = np.bincount(first, minlength=lang.vocab) / len(first)
  assert 0.5 * np.abs(emp - lang.stationary).sum() < 0.05  # total variation
  long = lang.sample(1, 200_000)  # unigram frequencies of a stream: the stationary law
  assert long.shape == (200_000,) and long.dtype == np.int32
  emp = np.bincount(long, minlength=lang.vocab) / len(long)
  assert 0.5 * np.abs(emp - lang.stationary).sum() < 0.02


def test_planted_ranks(lang):
  """Exact statements (k = rank):

  L = alpha U V^T / sqrt(k) + 1 b^T has rank k + 1; log P = L - lse 1^T has rank <= k + 2;
  row-centring cancels the lse term (rank k + 1); double-centring also cancels 1 b^T (rank k).
  """
  k = lang.rank
  L = lang.logit_matrix()
  assert np.allclose(lang.b, -np.log(np.arange(1, 65)))  # the Zipf bias: token id = its rank
  assert numerical_rank(L) == k + 1
  lp = lang.log_probs
  assert numerical_rank(lp) <= k + 2
  row_c = lp - lp.mean(1, keepdims=True)
  assert numerical_rank(row_c) == k + 1
  assert np.allclose(row_c, L - L.mean(1, keepdims=True), atol=1e-10)
  dbl = row_c - row_c.mean(0, keepdims=True)
  assert numerical_rank(dbl) == k
  # the logits reproduce the probabilities
  e = np.exp(L - L.max(1, keepdims=True))
  assert np.allclose(e / e.sum(1, keepdims=True), lang.probs, atol=1e-12)


def test_mixture_has_high_rank(mix):
  k = mix.rank
  row_c = mix.log_probs - mix.log_probs.mean(1, keepdims=True)
  r = numerical_rank(row_c)
  # M components of rank k+1 could give at most M(k+1) = 28 if log-probs mixed linearly;
  # the log of a mixture of softmaxes is full rank in practice.
  assert r > mix.n_mix * (k + 1) and r >= 0.9 * mix.vocab - 1, r
  comp = mix.component_logits()
  assert comp.shape == (4, 64, 64)
  assert all(numerical_rank(c) == k + 1 for c in comp)
  assert np.allclose(mix.logit_matrix(), mix.log_probs)


def test_context_two(lang2):
  assert lang2.n_contexts == 144 and numerical_rank(lang2.logit_matrix()) == lang2.rank + 1
  c = lang2.next_context(np.array([5]), np.array([7]))  # the last two tokens, oldest first
  assert lang2.context_tokens(c).tolist() == [[5 % 12, 7]]


def test_bad_parameters():
  with pytest.raises(ValueError, match="rank"):
    PlantedLanguage(16, 17)
  with pytest.raises(ValueError, match="planted language too large"):
    PlantedLanguage(1024, 4, context=3)
