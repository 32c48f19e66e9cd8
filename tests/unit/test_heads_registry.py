"""The head registry: each kind's matrix, factors, parameter and FLOP counts against closed formulas."""

import dataclasses
import math
import pkgutil
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sbjax import heads
from sbjax.config import ModelConfig
from sbjax.heads.lowrank import LowRankHead
from sbjax.heads.mos import MoSHead
from sbjax.heads.sigsoftmax import SigSoftmaxHead
from sbjax.model import Model, flops_per_token
from sbjax.optim import trainable_labels
from sbjax.studies.head_flops import head_flops

BASE = ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, max_len=8)
CFGS = {"dense": BASE, "tied": dataclasses.replace(BASE, head="tied"),
        "lowrank": dataclasses.replace(BASE, head=LowRankHead(rank=3)),
        "mos": dataclasses.replace(BASE, head=MoSHead(n_mix=2))}


def _head_params(c: ModelConfig) -> dict:
  """The embedding and the head's own parameters (its module's init), no trunk: small jits."""
  k1, k2 = jax.random.split(jax.random.key(1))
  p = {"embed": 0.02 * jax.random.normal(k1, (c.vocab_size, c.d_model))}
  mod = heads.make_head(c)
  if mod is not None:
    p["head"] = jax.jit(mod.init)(k2, jnp.zeros((1, c.d_model)))["params"]
  return p


@pytest.fixture(scope="module")
def params():
  return {k: _head_params(c) for k, c in CFGS.items()}


def test_registered_kinds_are_the_files_of_the_package():
  """A head is one file: every module of sbjax/heads (but base) registers exactly its kind."""
  files = {m.name for m in pkgutil.iter_modules(heads.__path__)} - {"base"}
  by_module = {k.__class__.__module__.rsplit(".", 1)[1]: k.name for k in heads.kinds()}
  assert set(by_module) == {f for f in files if not f.startswith("_")}
  assert heads.names() == ("dense", "tied", "lowrank", "mos", "sigsoftmax", "padded_lowrank")


def test_field_messages():
  """(A bad rank or n_mix: the bad-input table.)"""
  for bad, msg in ((dict(head="x"), "model.head='x'; allowed: dense | tied | lowrank | mos"),
                   (dict(head={"kind": "lowrank", "rank": 2, "init": "x"}),
                    "model.head.init='x'; allowed: scaled | godey"),
                   (dict(head={"kind": "mos", "rank": 2}),
                    "model.head.rank=2; allowed: the fields of a mos head: n_mix | dim | act"),
                   (dict(head={"rank": 2}),
                    'model.head={\'rank\': 2}; allowed: a head kind name, or a dict with its '
                    '"kind"')):
    with pytest.raises(ValueError, match="^invalid config: " + re.escape(msg)):
      ModelConfig(**bad)


def test_scores_equal_the_factors_and_the_matrix(params):
  """scores = x·Mᵀ = h·Wᵀ with W the head matrix (the model's); mos: normalised log-probs and
  its shared V×e matrix."""
  h = jax.random.normal(jax.random.key(2), (5, BASE.d_model))
  for k, c in CFGS.items():
    scores = jax.jit(lambda p, h, c=c: heads.scores_fn(p, c)(h))(params[k], h)
    fac = jax.jit(lambda p, h, c=c: heads.matrix_factors(p, h, c))(params[k], h)
    np.testing.assert_array_equal(Model(c).head_matrix(params[k]), heads.head_matrix(params[k], c))
    if k == "mos":
      assert fac is None
      np.testing.assert_array_equal(heads.head_matrix(params[k], c), params[k]["head"]["w"])
      np.testing.assert_allclose(jax.nn.logsumexp(scores, -1), 0.0, atol=1e-5)  # log-probs
      continue
    x, m = fac  # references in float64 on the host: the same on every backend
    x, m, w = (np.asarray(a, np.float64) for a in (x, m, heads.head_matrix(params[k], c)))
    np.testing.assert_allclose(x @ m.T, scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores, np.asarray(h, np.float64) @ w.T, rtol=1e-4, atol=1e-6)


def test_param_counts_match_the_formulas_and_the_trees(params):
  v, d = BASE.vocab_size, BASE.d_model
  want = {"dense": v * d, "tied": 0, "lowrank": v * 3 + 3 * d,
          "mos": d * 2 + 2 + d * 2 * d + 2 * d + v * d}
  for k, c in CFGS.items():
    assert heads.head_param_count(c) == want[k]
    leaves = jax.tree.leaves(params[k].get("head", {}))
    assert sum(math.prod(x.shape) for x in leaves) == want[k]
    trunk = Model(c).param_count() - want[k]
    assert trunk == Model(CFGS["dense"]).param_count() - v * d


def _dot_macs(jaxpr) -> int:
  """Multiply-adds of every dot_general in a jaxpr and its sub-jaxprs, from the shapes alone:
  (elements of the output) × (product of the lhs's contracted dimensions)."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (contract, _), _ = eqn.params["dimension_numbers"]
      lhs = eqn.invars[0].aval.shape
      total += math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in contract)
    for sub in eqn.params.values():
      sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's jaxpr
      if hasattr(sub, "eqns"):
        total += _dot_macs(sub)
  return total


def _flop_cfgs() -> dict:
  """One config per registered kind, its component/rank dimensions apart from d (16) and
  from each other so that a formula mixing them up fails."""
  out = {**CFGS, "mos": dataclasses.replace(BASE, head=MoSHead(n_mix=3, dim=5)),
         "sigsoftmax": dataclasses.replace(BASE, head=SigSoftmaxHead(rank=6)),
         "padded_lowrank": dataclasses.replace(  # its stored width pad is what the matmuls do
             BASE, head=heads.head_config("padded_lowrank", rank=3, pad=5))}
  assert set(out) == set(heads.names()), "add a config of each new head kind to _flop_cfgs"
  return out


def test_flop_params_are_the_forwards_dot_shapes():
  """flop_params (the one head FLOP count: flops_per_token 6×, head_flops 2×) against the
  multiply-adds of the dot_generals the head's forward traces to, for one token."""
  d, v = BASE.d_model, BASE.vocab_size
  cfgs = _flop_cfgs()
  body = 6.0 * BASE.n_layers * (4 * d * d + 2 * d * BASE.ff_dim) + 12 * BASE.n_layers * 8 * d / 2
  macs = {}
  for k, c in cfgs.items():
    jaxpr = jax.make_jaxpr(lambda p, h, c=c: heads.scores_fn(p, c)(h))(
        _head_params(c), jnp.zeros((1, d), jnp.float32))
    macs[k] = _dot_macs(jaxpr.jaxpr)
    assert heads.get(k).flop_params(c) == macs[k], k
    assert head_flops(c) == 2 * macs[k], k
    assert flops_per_token(c, 8) == pytest.approx(body + 6.0 * macs[k]), k
  # the counter itself on hand counts: MoS 3 × 5 (prior d·M, projections d·M·e, logits
  # M·e·V: the shared W once per component, more than its V·e parameters), sigsoftmax r = 6
  assert macs["mos"] == d * 3 + d * 3 * 5 + 3 * 5 * v > heads.head_param_count(cfgs["mos"])
  assert macs["sigsoftmax"] == d * 6 + 6 * v and macs["tied"] == macs["dense"] == d * v


def test_rank_and_head_config():
  assert [CFGS[k].rank for k in CFGS] == [16, 16, 3, 16]
  assert heads.get(CFGS["mos"].head) is heads.get("mos")  # a config names its kind
  assert heads.head_config("lowrank", rank=3) == CFGS["lowrank"].head == LowRankHead(3, "scaled")
  assert ModelConfig(head="tied").head == ModelConfig(head={"kind": "tied"}).head


def test_frozen_trunk_trains_exactly_the_head_keys():
  for k, c in CFGS.items():
    abstract = Model(c).abstract_params()
    labels = trainable_labels(abstract, c, True)
    trained = {top for top, sub in labels.items() if "train" in jax.tree.leaves(sub)}
    assert trained == set(heads.get(k).param_keys) == ({"embed"} if k == "tied" else {"head"})
    assert all(x == "train" for x in jax.tree.leaves(trainable_labels(abstract, c, False)))

