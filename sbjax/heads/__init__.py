"""Pluggable LM heads: dense, tied, low-rank (W = A·B), mixture of softmaxes, sigsoftmax and
the padded low-rank head of a rank population.

Each kind lives in its own module of this package and registers a ``HeadKind``
(``sbjax.heads.base``, which documents what a kind answers and how to add one) with its own
config dataclass (``ModelConfig.head``); ``get(name or config)`` returns the kind and
``head_config("lowrank", rank=8)`` builds a config. The helpers below take a ``ModelConfig``
and ask its kind; ``params`` is the *model's* parameter pytree (the tied head needs the input
embedding), a head's own parameters live under ``params["head"]``.
"""

from __future__ import annotations

from sbjax._extras import require

require("sbjax.heads")

from sbjax.heads.base import (HEAD_KEY, HeadConfig, HeadKind, for_hf, get, head_config,
                              kinds, leaf_spec, names, register, unregister, validate)

__all__ = ["HEAD_KEY", "HeadConfig", "HeadKind", "for_hf", "get", "head_config", "kinds",
           "leaf_spec", "names", "register", "unregister", "validate", "make_head", "scores_fn",
           "matrix_factors", "head_matrix", "head_param_count"]


def make_head(cfg):
  """The head module for cfg.head, or None for a tied head (it uses the embedding)."""
  return get(cfg.head).module(cfg)


def scores_fn(params, cfg):
  """h -> scores (logits, or log-probs for mos; ``log_softmax`` of them: the log-probs)."""
  kind = get(cfg.head)
  return lambda h: kind.scores(params, h, cfg)


def matrix_factors(params, h, cfg):
  """(x, M) with scores = x·Mᵀ (for chunked losses), or None when the head is not one
  matrix product."""
  return get(cfg.head).factors(params, h, cfg)


def head_matrix(params, cfg):
  """The effective V×d head matrix W whose rank limits the logits (for spectra and NC3)."""
  return get(cfg.head).matrix(params, cfg)


def head_param_count(cfg) -> int:
  """Number of parameters in the head (0 for tied), for equal-budget comparisons."""
  return get(cfg.head).param_count(cfg)
