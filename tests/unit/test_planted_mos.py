"""The planted MoS language (sbjax.data.planted_mos), the MoS head with its own component
dimension e and activation, the sigsoftmax head, and the exact representation of the
language by a MoS head with e = k + 1 (sbjax.studies.head_fit.exact_mos).

References are plain numpy: the mixture in probability space, the MoS head and sigsoftmax by
their formulas."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import heads
from sbjax.config import DataConfig, ModelConfig
from sbjax.data import make_dataset
from sbjax.data.planted_mos import PlantedMoS
from sbjax.studies import head_fit as hf
from sbjax.heads.mos import MoSHead
from sbjax.heads.sigsoftmax import SigSoftmaxHead

V, K, M = 24, 3, 3


@pytest.fixture(scope="module", params=["uniform", "dirichlet"])
def lang(request):
  return PlantedMoS(V, K, alpha=4.0, zipf=1.0, n_mix=M, gate=request.param, seed=3)


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_probs_are_the_mixture_and_rows_sum_to_1(lang):
  np.testing.assert_allclose(lang.probs.sum(1), 1.0, atol=1e-12)
  want = np.zeros((V, V))
  for m in range(M):  # written out: Σ_m π_cm softmax(α (R_m u_c)·y_w / √k + b_w)
    logits = 4.0 * (lang.U @ lang.R[m].T) @ lang.Y.T / math.sqrt(K) - np.log(np.arange(1, V + 1))
    want += lang.gates[:, m:m + 1] * _softmax(logits)
  np.testing.assert_allclose(lang.probs, want, rtol=1e-10, atol=1e-14)
  for r in lang.R:  # orthogonal rotations
    np.testing.assert_allclose(r @ r.T, np.eye(K), atol=1e-12)
  np.testing.assert_allclose(lang.gates.sum(1), 1.0, atol=1e-12)
  if lang.gate == "uniform":
    assert np.all(lang.gates == 1.0 / M)
  else:
    assert np.std(lang.gates[:, 0]) > 0.05  # drawn per context


def test_high_rank(lang):
  """(Its stationary law and entropy: the planted languages' shared machinery, test_data_planted.)"""
  pi = lang.stationary
  m = lang.log_probs - lang.log_probs.mean(1, keepdims=True)
  s = np.linalg.svd(np.sqrt(pi)[:, None] * m, compute_uv=False)
  assert np.sum(s > 1e-9 * s[0]) > K + 1  # the log of a mixture is not rank k+1


def test_bad_parameters_and_dataset():
  with pytest.raises(ValueError, match=r"gate='x' \(uniform \| dirichlet\)"):
    PlantedMoS(8, 2, gate="x")
  cfg = DataConfig(source="planted_mos", options=dict(vocab=16, rank=2, mix=3, gate="dirichlet",
                                                     train_tokens=4096, val_tokens=2048))
  ds = make_dataset(cfg, seq_len=16, global_batch_size=4, process_index=0, process_count=1)
  assert isinstance(ds.planted, PlantedMoS) and ds.planted.n_mix == 3
  assert ds.planted.gate == "dirichlet" and ds.info()["planted"]["kind"] == "planted_mos"
  assert ds.train_batch(0).shape == (4, 17)


def _mos_cfg(d_model=K + M, **head):
  return ModelConfig(vocab_size=V, d_model=d_model, n_heads=1, pos="learned",
                     head=MoSHead(**{"n_mix": M, "dim": K + 1, "act": "linear", **head}))


def test_mos_with_e_equal_k_plus_1_reproduces_p_exactly(lang):
  mc = _mos_cfg()
  params, h = hf.exact_mos(lang, mc)
  lp = np.asarray(hf.head_log_probs(params, h, mc))
  assert np.abs(lp - lang.log_probs).max() < 1e-5


def test_mos_component_dimension_and_activation():
  d, e = 8, 5
  lin, tanh = _mos_cfg(d_model=d, dim=e), _mos_cfg(d_model=d, dim=e, act="tanh")
  want = V * e + M * d * e + M * e + M * d + M
  key = jax.random.key(0)
  h = jax.random.normal(key, (4, d))
  outs = {}
  for name, mc in (("linear", lin), ("tanh", tanh)):
    p = heads.make_head(mc).init(key, jnp.zeros((1, d)))["params"]
    p = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(key, x.shape), p)  # out of tanh's linear range
    assert heads.head_param_count(mc) == want
    assert sum(x.size for x in jax.tree.leaves(p)) == want
    assert p["w"].shape == (V, e) and heads.head_matrix({"head": p}, mc).shape == (V, e)
    outs[name] = np.asarray(jax.jit(heads.scores_fn({"head": p}, mc))(h))
    # numpy reference of the head's formula
    g = np.einsum("nd,dme->nme", np.asarray(h), p["proj_w"]) + np.asarray(p["proj_b"])
    g = np.tanh(g) if name == "tanh" else g
    comp = np.einsum("nme,ve->nmv", g, p["w"])
    comp = comp - np.log(np.exp(comp).sum(-1, keepdims=True))
    prior = np.asarray(h) @ p["prior_w"] + np.asarray(p["prior_b"])
    prior = prior - np.log(np.exp(prior).sum(-1, keepdims=True))
    ref = np.log(np.exp(comp + prior[:, :, None]).sum(1))
    np.testing.assert_allclose(outs[name], ref, rtol=1e-4, atol=1e-4)
  assert np.abs(outs["linear"] - outs["tanh"]).max() > 1e-2


def test_sigsoftmax_formula_and_parameters():
  d, r = 8, 3
  mc = ModelConfig(vocab_size=V, d_model=d, n_heads=1, pos="learned",
                   head=SigSoftmaxHead(rank=r))
  key = jax.random.key(1)
  p = heads.make_head(mc).init(key, jnp.zeros((1, d)))["params"]
  p = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(key, x.shape), p)  # bias != 0
  assert heads.head_param_count(mc) == V * r + r * d + V
  assert sum(x.size for x in jax.tree.leaves(p)) == V * r + r * d + V
  h = np.asarray(jax.random.normal(jax.random.key(2), (5, d)))
  z = h @ (np.asarray(p["a"]) @ np.asarray(p["b"])).T + np.asarray(p["bias"])
  want = np.log(np.exp(z) / (1 + np.exp(-z)))  # log(exp(z) σ(z))
  got = np.asarray(heads.scores_fn({"head": p}, mc)(jnp.asarray(h)))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  full = dataclasses.replace(mc, head=SigSoftmaxHead())
  assert heads.head_param_count(full) == V * d + d * d + V and full.rank == d
