"""The collapse ceiling of a planted language against direct numpy NC1 and NC4."""

import numpy as np
import pytest

from experiments.collapse import ceiling as CC
from sbjax.data.planted import PlantedLanguage


@pytest.fixture(scope="module")
def lang():
  return PlantedLanguage(vocab=32, rank=7, alpha=3.0, seed=1)  # K=32, r=8: the core compile of test_collapse_variants


def direct_nc1_nc4(lang, h, w):
  """Loop over every (context, token) pair with its probability pi_c P(w|c): class means,
  variances, CDNV (k=2) over class pairs, and the NC4 hit rate per token."""
  n_ctx, v = lang.probs.shape
  mass, sums, sqs = np.zeros(v), np.zeros((v, h.shape[1])), np.zeros(v)
  for c in range(n_ctx):
    for y in range(v):
      p = lang.stationary[c] * lang.probs[c, y]
      mass[y] += p
      sums[y] += p * h[c]
  mu = sums / mass[:, None]
  for c in range(n_ctx):
    for y in range(v):
      sqs[y] += lang.stationary[c] * lang.probs[c, y] * np.sum((h[c] - mu[y]) ** 2)
  var = sqs / mass
  cd = [((var[a] + var[b]) / 2) / np.sum((mu[a] - mu[b]) ** 2) ** 2
        for a in range(v) for b in range(a + 1, v)]
  hit = 0.0
  for c in range(n_ctx):
    lin = int(np.argmax([h[c] @ w[y] for y in range(v)]))
    ncc = int(np.argmin([np.sum((h[c] - mu[y]) ** 2) for y in range(v)]))
    hit += lang.stationary[c] * lang.probs[c].sum() * (lin == ncc)
  return float(np.mean(cd)), hit


@pytest.mark.parametrize("variant", ["balanced", "planted"])
def test_ceiling_is_optimal_and_matches_direct_numpy(lang, variant):
  h, w = CC.optimal_factorisation(lang, variant)
  assert h.shape[1] == lang.rank + 1  # rank k + 1 after row-centring
  logits = h @ w.T
  logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  np.testing.assert_allclose(logp, lang.log_probs, atol=1e-9)  # the Bayes-optimal model
  r = CC.ceiling_metrics(lang, variant)
  cdnv, nc4 = direct_nc1_nc4(lang, h, w)
  assert r["nc1_cdnv"] == pytest.approx(cdnv, rel=2e-3)
  assert r["nc1_log10_mean_cdnv"] == pytest.approx(np.log10(cdnv), abs=1e-3)
  assert r["nc4_agreement"] == pytest.approx(nc4, abs=1e-12)
  assert r["n_classes"] == lang.vocab and r["entropy"] == pytest.approx(lang.entropy)
  assert r["nc2_norm_cov_corrected"] == pytest.approx(r["nc2_norm_cov"], rel=1e-4)


def test_balanced_factorisation_has_least_norm(lang):
  """The SVD-balanced factors have ||H||^2 + ||W||^2 = 2 * nuclear norm, below the planted ones."""
  hb, wb = CC.optimal_factorisation(lang, "balanced")
  hp, wp = CC.optimal_factorisation(lang, "planted")
  zc = lang.logit_matrix() - lang.logit_matrix().mean(1, keepdims=True)
  nuc = np.linalg.svd(zc, compute_uv=False).sum()
  assert (hb ** 2).sum() + (wb ** 2).sum() == pytest.approx(2 * nuc, rel=1e-9)
  assert (hp ** 2).sum() + (wp ** 2).sum() > 2 * nuc
