"""Pluggable LM heads: dense, tied, low-rank (W = A·B) and mixture of softmaxes.

Each kind lives in its own module of this package and registers a ``HeadKind``
(``sbjax.heads.base``, which documents what a kind answers) with its own config dataclass
(``DenseHead``, ``TiedHead``, ``LowRankHead(rank, init)``, ``MoSHead(n_mix, dim, act)``,
``SigSoftmaxHead(rank)``: ``ModelConfig.head``); ``get(name or config)`` returns the kind and
``head_config("lowrank", rank=8)`` builds a config.
Adding a head is one new file here plus its tests. The helpers below take a
``ModelConfig`` and ask its kind:

- ``make_head(cfg)``: the flax module (named ``"head"``), or None for a tied head;
- ``scores_fn(params, cfg)``: h -> scores (logits; normalised log-probs for ``mos``), so
  ``log_softmax(scores)`` is always the model's log-probabilities, in float32;
- ``matrix_factors(params, h, cfg)``: (x, M) with scores = x·Mᵀ, for chunked losses:
  dense (h, W), tied (h, embed), lowrank (h·Bᵀ, A); None for mos;
- ``head_matrix(params, cfg)``: the V×d matrix W whose rank limits the logits: the dense
  kernel, the input embedding (tied), the product A·B (lowrank), or mos's shared matrix;
- ``head_param_count(cfg)``: parameters of the head (0 for tied).

``params`` is the *model's* parameter pytree (the tied head needs the input embedding);
a head's own parameters live under ``params["head"]``.
"""

from __future__ import annotations

from sbjax._extras import require

require("sbjax.heads")

from sbjax.heads.base import (HEAD_KEY, HeadConfig, HeadKind, for_hf, get, head_config,
                              hf_exportable, kinds, leaf_spec, names, register, unregister,
                              validate)

__all__ = ["HEAD_KEY", "HeadConfig", "HeadKind", "for_hf", "get", "head_config",
           "hf_exportable", "kinds", "leaf_spec",
           "names", "register", "unregister", "validate", "make_head", "scores_fn",
           "matrix_factors", "head_matrix", "head_param_count"]


def make_head(cfg):
  """The head module for cfg.head, or None for a tied head (it uses the embedding)."""
  return get(cfg.head).module(cfg)


def scores_fn(params, cfg):
  """h -> scores of the head (logits, or log-probs for mos), params closed over."""
  kind = get(cfg.head)
  return lambda h: kind.scores(params, h, cfg)


def matrix_factors(params, h, cfg):
  """(x, M) with scores = x·Mᵀ, or None when the head is not one matrix product."""
  return get(cfg.head).factors(params, h, cfg)


def head_matrix(params, cfg):
  """The effective V×d head matrix W of a model's params (for spectra and NC3)."""
  return get(cfg.head).matrix(params, cfg)


def head_param_count(cfg) -> int:
  """Number of parameters in the head (0 for tied), for equal-budget comparisons."""
  return get(cfg.head).param_count(cfg)
