"""The collapse ceiling of a planted language: NC1-NC4 of the Bayes-optimal model.

On the planted-rank language (``sbjax.data.planted.PlantedLanguage``, context 1: exact P(w|c)
and stationary pi) the row-centred optimal logits Z~ = Z - Z 1 1^T / V, Z = alpha U V^T /
sqrt(k) + 1 b^T, have rank <= k + 1, and any factorisation Z~ = H W^T (features H, one per
context; head W) is an optimal model (loss = the entropy rate H). It is not unique and the
metrics are not invariant to it, so two canonical ones: ``balanced`` (SVD, H = U_r S_r^1/2,
W = V_r S_r^1/2: least ||H||^2 + ||W||^2, the one weight decay favours) and ``planted`` (the
generating parameters, h_c = [alpha u_c / sqrt(k), 1], w_v = [v_v - mean v, b_v - mean b]).
A token (c, w) has probability q(c, w) = pi_c P(w | c) and feature h_c, so the class statistics
are population values (mass m_w = sum_c q(c, w), mean, population variance) and NC1-NC3 are
``collapse_metrics_from_stats`` of them; NC4: a context is a hit when argmax_v <w_v, h_c> =
argmin_v ||h_c - mu_v||^2, weighted by pi_c (per class: by q(c, w) / m_w).
"""

from __future__ import annotations

import numpy as np

from sbjax.data.planted import PlantedLanguage
from sbjax import metrics as C

# Population statistics have no sampling error: the count passes min_count and makes the
# finite-sample correction negligible.
POPULATION_COUNT = 1 << 30
VARIANTS = ("balanced", "planted")


def optimal_factorisation(lang: PlantedLanguage, variant: str = "balanced",
                          rtol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
  """(H: C x r, W: V x r) float64 with H W^T = the row-centred optimal logits (module doc)."""
  if variant not in VARIANTS:
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
  z = lang.logit_matrix()
  if variant == "planted":
    h = np.concatenate([lang.alpha * lang.U / np.sqrt(lang.rank), np.ones((z.shape[0], 1))], 1)
    w = np.concatenate([lang.V - lang.V.mean(0), (lang.b - lang.b.mean())[:, None]], 1)
    return h, w
  u, s, vt = np.linalg.svd(z - z.mean(1, keepdims=True), full_matrices=False)
  r = int(np.sum(s > rtol * s[0]))
  root = np.sqrt(s[:r])
  return u[:, :r] * root, vt[:r].T * root


def population_stats(lang, h: np.ndarray, w: np.ndarray) -> dict:
  """Exact class statistics of the model (h per context, head w) on the language:
  {mass (V,), means (V x r), variances (V,), q (C x V), hits (C,): NC4 per context}."""
  q = lang.stationary[:, None] * lang.probs
  mass = q.sum(0)
  safe = np.where(mass > 0, mass, 1.0)
  means = (q.T @ h) / safe[:, None]
  variances = np.maximum((q.T @ np.sum(h * h, 1)) / safe - np.sum(means * means, 1), 0.0)
  seen = mass > 0
  d2 = np.sum(h * h, 1)[:, None] - 2 * h @ means[seen].T + np.sum(means[seen] ** 2, 1)[None]
  hits = ((h @ w[seen].T).argmax(1) == d2.argmin(1)).astype(np.float64)
  return {"mass": mass, "means": means, "variances": variances, "q": q, "hits": hits}


def ceiling_metrics(lang: PlantedLanguage, variant: str = "balanced") -> dict:
  """NC1-NC4 of the Bayes-optimal model of ``lang``: every scalar key of
  ``collapse_metrics_from_stats``, ``nc4_agreement`` (token-weighted), ``nc4_agreement_per_class``,
  ``width`` r, ``entropy`` H (nats, the optimum's loss) and ``variant``."""
  h, w = optimal_factorisation(lang, variant)
  st = population_stats(lang, h, w)
  counts = np.where(st["mass"] > 0, POPULATION_COUNT, 0).astype(np.int64)
  out = C.collapse_metrics_from_stats(st["means"], st["variances"], counts, w,
                                      options=C.CollapseOptions(min_count=1)).to_dict()
  seen = st["mass"] > 0
  per_class = (st["q"].T @ st["hits"])[seen] / st["mass"][seen]
  out.update(nc4_agreement=float(lang.stationary @ st["hits"]),
             nc4_agreement_per_class=float(per_class.mean()), width=int(h.shape[1]),
             entropy=float(lang.entropy), variant=variant)
  return out


def true_nll(lang: PlantedLanguage, wins: np.ndarray) -> float:
  """-mean log P(y | x) over the targets of packed windows [n, T+1] (context 1)."""
  return float(-np.mean(lang.log_probs[wins[:, :-1], wins[:, 1:]]))


def ceiling_rows(vocab: int, rank: int) -> list[dict]:
  """collapse_ceiling.csv: the language's parameters and its ceiling, one row per variant."""
  lang = PlantedLanguage(vocab=vocab, rank=rank, seed=0)
  rows = []
  for v in VARIANTS:
    r = ceiling_metrics(lang, v)
    rows.append({"vocab": lang.vocab, "planted_rank": lang.rank, "alpha": lang.alpha,
                 "zipf": lang.zipf, **{k: np.asarray(x).item() for k, x in r.items()
                                       if np.ndim(x) == 0}})
  return rows
