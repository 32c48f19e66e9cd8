"""sbjax.studies.head_flops against XLA's own cost analysis of each head's forward pass."""

import jax
import jax.numpy as jnp
import pytest

from sbjax import heads
from sbjax.overrides import config_from
from sbjax.studies.head_flops import head_flops

V, D, T = 64, 16, 7


def _cfg(o):
  return config_from("tiny", {"model.vocab_size": V, "model.d_model": D, **o}).model


def _xla_flops(cfg) -> float:
  """XLA's flop count of the head module on T tokens, per token."""
  mod = heads.get(cfg.head).module(cfg)
  h = jnp.ones((T, D), jnp.float32)
  p = mod.init(jax.random.key(0), h)
  c = jax.jit(mod.apply).lower(p, h).compile().cost_analysis()
  c = c[0] if isinstance(c, list) else c
  return c["flops"] / T


@pytest.mark.parametrize("o", [{"model.head": "dense"},
                               {"model.head": "lowrank", "model.head.rank": 5}])
def test_dense_and_lowrank_equal_xla(o):
  cfg = _cfg(o)
  assert head_flops(cfg) == _xla_flops(cfg)  # the logits are matmuls only


def _mos(m, e):
  return _cfg({"model.head": "mos", "model.head.n_mix": m, "model.head.dim": e,
               "model.head.act": "linear"})


def test_mos_matmuls_against_xla():
  # XLA also counts the elementwise work (M log-softmaxes over V, the logsumexp, the biases):
  # it is at least the matmuls and at most 16 flops per softmaxed logit more
  for m, e in ((1, 4), (3, 4), (2, 8)):
    cfg = _mos(m, e)
    extra = _xla_flops(cfg) - head_flops(cfg)
    assert 0 <= extra <= 16 * m * V + 2 * m * e
  # the component dimension e enters the matmuls (2(dM + MV) per unit of e) and the
  # projections' bias (M adds per unit of e): XLA's count moves by exactly that
  for m in (1, 3):
    lo, hi = _mos(m, 4), _mos(m, 8)
    assert _xla_flops(hi) - _xla_flops(lo) == head_flops(hi) - head_flops(lo) + m * 4


def test_tied_and_sigsoftmax_from_the_registry():
  # tied: no head module, but the embedding's V×D product is computed
  assert head_flops(_cfg({"model.head": "tied"})) == 2 * V * D
  # sigsoftmax: the matmuls of z = A(Bh) + c; XLA adds the bias and z + log σ(z), a few
  # flops per vocabulary entry
  cfg = _cfg({"model.head": "sigsoftmax", "model.head.rank": 5})
  assert head_flops(cfg) == 2 * (D * 5 + 5 * V)
  assert 0 < _xla_flops(cfg) - head_flops(cfg) <= 16 * V
