"""The on-device planted sampler (sbjax.data.planted_device, ``data.options.sampler=device``):
its next-token counts per context against the exact P(.|c) (scipy chi-square, Bonferroni over
the contexts), its start distribution against the stationary one, the float32 survival tables'
precision on rare tokens, and one export for cpu, cuda and tpu (its dataset:
test_data_planted_streams)."""

import jax
import numpy as np
import pytest
from scipy import stats

from sbjax.data import planted_device as pdev
from sbjax.data.planted import PlantedLanguage, PlantedMixture

N_SEQS, LENGTH = 1024, 65  # 65,536 transitions per draw
ALPHA = 1e-3  # family-wise level of a chi-square check over all contexts


def draw(lang, context=1, seed=0, data_seed=0, step=0, n=N_SEQS, length=LENGTH):
  t = pdev.tables(lang, seed, data_seed)
  f = jax.jit(pdev.sample_chains, static_argnums=(2, 3, 4))
  return np.asarray(f(t, pdev.batch_key(t, step), n, length, context))


def transition_counts(tokens, vocab, context):
  """counts[c, w] of (context index, next token) over every position t >= context."""
  c = np.zeros(tokens[:, context:].shape, np.int64)
  for i in range(context):
    c = c * vocab + tokens[:, i:tokens.shape[1] - context + i]
  counts = np.zeros((vocab ** context, vocab), np.int64)
  np.add.at(counts, (c.ravel(), tokens[:, context:].ravel()), 1)
  return counts


def chisquare_p(counts, p):
  """p-value of counts ~ Multinomial(n, p), cells with expected count < 5 pooled."""
  n = counts.sum()
  exp = n * p
  small = exp < 5
  obs_b, exp_b = counts[~small], exp[~small]
  if small.any():
    obs_b = np.append(obs_b, counts[small].sum())
    exp_b = np.append(exp_b, exp[small].sum())
  if len(obs_b) < 2:
    return 1.0
  return float(stats.chisquare(obs_b, exp_b * (obs_b.sum() / exp_b.sum())).pvalue)


def per_context_p(counts, probs):
  return np.array([chisquare_p(counts[c], probs[c]) for c in range(len(probs))
                   if counts[c].sum() >= 50])


@pytest.mark.parametrize("lang,context", [
    (PlantedMixture(vocab=8, rank=2, n_mix=3, alpha=3.0, seed=1), 1),
    (PlantedLanguage(vocab=4, rank=2, alpha=3.0, context=2, seed=2), 2)])
def test_next_token_counts_match_the_exact_table_per_context(lang, context):
  tokens = draw(lang, context)
  counts = transition_counts(tokens, lang.vocab, context)
  p = per_context_p(counts, lang.probs)
  assert len(p) == lang.n_contexts  # every context seen often enough to be tested
  assert p.min() > ALPHA / len(p), p  # Bonferroni over the contexts
  # the start: the first ``context`` tokens are one context drawn from the stationary law
  start = np.zeros(N_SEQS, np.int64)
  for i in range(context):
    start = start * lang.vocab + tokens[:, i]
  assert chisquare_p(np.bincount(start, minlength=lang.n_contexts), lang.stationary) > ALPHA


def test_survival_tables_keep_rare_probabilities():
  rng = np.random.default_rng(0)
  p = np.concatenate([rng.dirichlet(np.ones(60)), [3e-9, 1e-8, 4e-8, 2e-7]])
  p = rng.permutation(p / p.sum())
  surv, order = pdev.survival_table(p[None])
  implied = np.append(-np.diff(surv[0].astype(np.float64)), surv[0, -1])  # P(position j)
  got = np.empty_like(p)
  got[order[0]] = implied
  np.testing.assert_allclose(got, p, rtol=1e-3)  # down to 3e-9 (a head-first float32 CDF: 0)
  u = np.asarray(pdev.uniform(jax.random.key(0), (4096,)))
  assert u.dtype == np.float32 and 0.0 <= u.min() and u.max() <= 1.0
  assert abs(u.mean() - 0.5) < 0.02


@pytest.mark.parametrize("size", [2, 3, 8, 13, 64, 100])
def test_search_counts_the_prefix_above_u(size):
  rng = np.random.default_rng(size)
  surv = np.sort(rng.random((5, size)).astype(np.float32), axis=1)[:, ::-1].copy()
  surv[:, 0], surv[1, 1:3] = 1.0, surv[1, 1]  # ties
  rows = np.repeat(np.arange(5), 40).astype(np.int32)
  u = rng.random(200).astype(np.float32)
  u[:5], u[5:10] = surv[rows[:5], -1], 1.0  # on a value, at the end of the range
  blocks, coarse = pdev.blocked(surv)
  got = np.asarray(pdev.search(blocks, coarse, rows, u))
  want = [(surv[r, 1:] > x).sum() for r, x in zip(rows, u)]
  np.testing.assert_array_equal(got, want)


def test_the_sampler_lowers_for_cpu_cuda_and_tpu():
  """No accelerator here: one jax.export of the jitted draw for all three platforms, with the
  batch sharded over 'data' on an abstract 8-device mesh (as the train step shards it)."""
  from jax.sharding import NamedSharding, PartitionSpec as P

  from sbjax import lowering
  lang = PlantedMixture(vocab=16, rank=2, n_mix=2)
  t = pdev.tables(lang, 0, 0)
  mesh = lowering.abstract_mesh((8, 1, 1))
  repl = NamedSharding(mesh, P())
  args = (lowering.sds(t, jax.tree.map(lambda _: repl, t)),
          jax.ShapeDtypeStruct((), np.int32, sharding=repl))
  batch = NamedSharding(mesh, P("data"))
  exp = lowering.export_checked(
      lambda: jax.jit(lambda t, s: pdev.train_batch(t, s, 16, 8, 1), out_shardings=batch), args,
      name="planted_device.train_batch")
  assert sorted(exp.platforms) == ["cpu", "cuda", "tpu"] and exp.nr_devices == 8
  assert lowering.custom_calls(exp) == []  # gathers and threefry: no platform kernel
