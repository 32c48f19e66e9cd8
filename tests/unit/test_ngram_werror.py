"""Target rank (Godey E6): n-gram count matrices (sbjax.studies.ngram), implicit sparse +
rank-one matrices and W-error curves by Gram / randomized SVD (experiments/target_rank/
lowrank_svd.py). The experiment end to end is in tests/e2e/test_target_rank.py.

References are independent: collections.Counter for the counts, dense numpy formulas and
numpy.linalg.svd for the W-error, an analytic spectrum for the large sparse case.
"""


import numpy as np
import pytest
import scipy.sparse as sp

from experiments.target_rank import lowrank_svd
from sbjax.studies import ngram
from tests._ngram_reference import counter_reference, np_w_error


def _markov_tokens(seed, vocab, length, order=2):
  """A token stream with n-gram structure: a random sparse order-2 Markov chain."""
  rng = np.random.default_rng(seed)
  nxt = {}
  out = list(rng.integers(0, vocab, order))
  for _ in range(length - order):
    key = tuple(out[-order:])
    if key not in nxt:
      support = rng.choice(vocab, size=int(rng.integers(1, 6)), replace=False)
      p = rng.dirichlet(np.ones(support.size))
      nxt[key] = (support, p)
    s, p = nxt[key]
    out.append(int(rng.choice(s, p=p)) if rng.random() > 0.1 else int(rng.integers(vocab)))
  return np.asarray(out, np.int64)


@pytest.mark.parametrize("n,min_count", [(1, 1), (2, 1), (2, 3), (3, 2)])
def test_ngram_counts_match_counter(n, min_count):
  rng = np.random.default_rng(n * 10 + min_count)
  streams = [rng.integers(0, 7, 300), rng.integers(0, 7, 5), rng.integers(0, 7, 120)]
  m = ngram.context_counts(streams, n, min_count, vocab_size=9)
  ref_pairs, ref_ctx = counter_reference(streams, n, min_count)
  assert m.counts.shape == (len(ref_ctx), 9)
  got = {}
  coo = m.counts.tocoo()
  for r, v, k in zip(coo.row, coo.col, coo.data):
    got[(tuple(int(x) for x in m.contexts[r]), int(v))] = int(k)
  assert got == ref_pairs
  assert {tuple(c): int(k) for c, k in zip(m.contexts, m.context_counts)} == ref_ctx
  assert np.all(np.diff(m.context_counts) <= 0)  # rows by decreasing count
  assert m.n_pairs == sum(max(0, len(s) - n) for s in streams)


def test_ngram_bad_input():
  with pytest.raises(ValueError, match=r"\[0, vocab_size=3\)"):
    ngram.context_counts([1, 2, 3], n=1, vocab_size=3)
  with pytest.raises(ValueError, match="shorter than n"):
    ngram.context_counts([1, 2], n=4)


def _dense_variants(counts, k):
  n = counts.toarray().astype(np.float64)
  tot = n.sum(1, keepdims=True)
  v = n.shape[1]
  lp = np.log((n + k) / (tot + k * v))
  return {"raw": n / tot, "addk": (n + k) / (tot + k * v), "logp": lp,
          "logp_centered": lp - lp.mean(1, keepdims=True)}


@pytest.fixture(scope="module")
def small_counts():
  toks = _markov_tokens(0, 60, 30_000)
  return ngram.context_counts(toks, 2, min_count=2, vocab_size=60)


@pytest.mark.parametrize("variant", lowrank_svd.VARIANTS)
def test_w_error_matches_numpy_svd(small_counts, variant):
  k = 0.1
  dense = _dense_variants(small_counts.counts, k)[variant]
  op = lowrank_svd.variant_matrix(small_counts.counts, variant, k)
  c, v = op.S.shape
  assert c > v > 32
  np.testing.assert_allclose(op.S.toarray() + np.outer(op.a, op.b), dense, rtol=1e-12,
                             atol=1e-12)
  np.testing.assert_allclose(op.frobenius_sq(), (dense ** 2).sum(), rtol=1e-12)
  x = np.random.default_rng(1).standard_normal((v, 3))
  y = np.random.default_rng(2).standard_normal((c, 3))
  np.testing.assert_allclose(op.matmat(x), dense @ x, rtol=1e-10, atol=1e-10)
  np.testing.assert_allclose(op.rmatmat(y), dense.T @ y, rtol=1e-10, atol=1e-10)
  dims = [0, 1, 2, 4, 8, 16, 32, v, v + 5]
  ref = np_w_error(dense, dims)
  _, g, _ = lowrank_svd.w_error_curve(op, dims, method="gram")
  np.testing.assert_allclose(g, ref, atol=1e-6)
  _, rz, method = lowrank_svd.w_error_curve(op, dims[:-2], method="randomized")  # top 32 of 60
  assert method == "randomized"
  np.testing.assert_allclose(rz, ref[:-2], atol=2e-3)
  assert np.all(np.diff(g) <= 1e-12) and np.all(np.diff(rz) <= 1e-12)
  # the wide case (C < V) uses the C x C Gram
  wide = lowrank_svd.variant_matrix(small_counts.counts[:40], variant, k)
  np.testing.assert_allclose(lowrank_svd.w_error_curve(wide, [1, 4, 16], method="gram")[1],
                             np_w_error(_dense_variants(small_counts.counts[:40], k)[variant],
                                         [1, 4, 16]), atol=1e-6)


def test_huge_sparse_matrix_is_never_densified():
  """C = V = 50,000 (dense: 20 GB) with a known spectrum: a scaled partial permutation."""
  c = v = 50_000
  rng = np.random.default_rng(0)
  sig = np.concatenate([0.7 ** np.arange(12), np.full(5000, 1e-3)])
  rows = rng.choice(c, sig.size, replace=False)
  cols = rng.choice(v, sig.size, replace=False)
  s = sp.csr_matrix((sig, (rows, cols)), shape=(c, v))
  op = lowrank_svd.SparsePlusRankOne(s, np.zeros(c), np.ones(v))
  dims = [1, 2, 4, 8]
  _, werr, method = lowrank_svd.w_error_curve(op, dims)  # auto: min(C, V) > gram_max_dim
  assert method == "randomized"
  f2 = float((sig ** 2).sum())
  assert op.frobenius_sq() == pytest.approx(f2, rel=1e-12)
  ref = [np.sqrt((np.sort(sig)[::-1][d:] ** 2).sum() / f2) for d in dims]
  np.testing.assert_allclose(werr, ref, atol=1e-6)
  counts = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0]]))
  for variant, k in (("logp", 0.0), ("probs", 0.1)):
    with pytest.raises(ValueError, match=f"variant '{variant}' with k={k}"):
      lowrank_svd.variant_matrix(counts, variant, k)
