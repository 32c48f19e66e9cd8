"""The collapse ceiling of a planted language: NC1-NC4 of the Bayes-optimal model.

Wu & Papyan ask how much neural collapse is possible when the next token is random. On the
planted-rank language (``sbjax.data.planted.PlantedLanguage``: exact P(w|c) and stationary
context distribution pi) the answer is computable exactly. The Bayes-optimal logits are the
log-probabilities up to a per-context constant, and the row-centred logit matrix

    Z~ = Z - Z 1 1^T / V,     Z = alpha U V^T / sqrt(k) + 1 b^T     (C x V),

has rank <= k + 1. Any factorisation Z~ = H W^T (H: C x r features, one per context; W:
V x r head, r = rank Z~) is an optimal model of width r: softmax(h_c W^T) = P(. | c), its
loss is the entropy rate H. The factorisation is not unique (H A, W A^-T for any invertible
A give the same model, and the collapse metrics are not invariant to A), so two canonical
ones are offered:

* ``"balanced"`` (default): Z~ = U_r S_r V_r^T (SVD), H = U_r S_r^(1/2), W = V_r S_r^(1/2),
  the factorisation of least ||H||_F^2 + ||W||_F^2 (the one weight decay favours);
* ``"planted"``: the generating parameters, h_c = [alpha u_c / sqrt(k), 1] and w_v =
  [v_v - mean_v' v_v', b_v - mean b] (rank k + 1).

A token is a pair (context c, next token w) with probability q(c, w) = pi_c P(w | c), and
its feature is h_c. The class statistics are then exact population values: the class mass
m_w = sum_c q(c, w), the class mean mu_w = sum_c q(c, w) h_c / m_w and the (biased,
population) variance sigma_w^2 = sum_c q(c, w) ||h_c - mu_w||^2 / m_w. NC1-NC3 are
:func:`sbjax.metrics.collapse_metrics_from_stats` of these (every class with m_w > 0 is
analysed; no finite-sample bias, so the corrected norm CoV equals the raw one). NC4 on the
population: a token at context c is a hit when argmax_v <w_v, h_c> = argmin_v ||h_c -
mu_v||^2, so the weighted agreement is sum_c pi_c hit_c (the per-class variant: the mean
over w of sum_c q(c, w) hit_c / m_w).
"""

from __future__ import annotations

import numpy as np

from sbjax.data.planted import PlantedLanguage
from sbjax import metrics as C

# Pseudo-count given to collapse_metrics_from_stats: population statistics have no sampling error, so
# the count only has to pass min_count and make the finite-sample correction negligible.
POPULATION_COUNT = 1 << 30
VARIANTS = ("balanced", "planted")


def optimal_factorisation(lang: PlantedLanguage, variant: str = "balanced",
                          rtol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
  """(H: C x r, W: V x r) float64 with H W^T = the row-centred optimal logits (module doc)."""
  if variant not in VARIANTS:
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
  z = lang.logit_matrix()
  zc = z - z.mean(1, keepdims=True)
  if variant == "planted":
    h = np.concatenate([lang.alpha * lang.U / np.sqrt(lang.rank), np.ones((z.shape[0], 1))], 1)
    w = np.concatenate([lang.V - lang.V.mean(0), (lang.b - lang.b.mean())[:, None]], 1)
    return h, w
  u, s, vt = np.linalg.svd(zc, full_matrices=False)
  r = int(np.sum(s > rtol * s[0]))
  root = np.sqrt(s[:r])
  return u[:, :r] * root, vt[:r].T * root


def population_stats(lang, h: np.ndarray, w: np.ndarray) -> dict:
  """Exact class statistics of the model (h per context, head w) on the language:
  {mass (V,), means (V x r), variances (V,), joint q (C x V), hits (C,) NC4 per context}."""
  q = lang.stationary[:, None] * lang.probs  # C x V
  mass = q.sum(0)
  safe = np.where(mass > 0, mass, 1.0)
  means = (q.T @ h) / safe[:, None]
  sq = (q.T @ np.sum(h * h, 1)) / safe
  variances = np.maximum(sq - np.sum(means * means, 1), 0.0)
  seen = mass > 0
  scores = h @ w[seen].T
  d2 = np.sum(h * h, 1)[:, None] - 2 * h @ means[seen].T + np.sum(means[seen] ** 2, 1)[None]
  hits = (scores.argmax(1) == d2.argmin(1)).astype(np.float64)
  return {"mass": mass, "means": means, "variances": variances, "q": q, "hits": hits}


def ceiling_metrics(lang: PlantedLanguage, variant: str = "balanced", **metric_kw) -> dict:
  """NC1-NC4 of the Bayes-optimal model of ``lang`` (the collapse ceiling; module doc).

  Returns every scalar key of ``collapse_metrics_from_stats`` plus ``nc4_agreement`` (token-weighted),
  ``nc4_agreement_per_class``, ``width`` r, ``entropy`` H (nats, the optimum's loss) and
  ``variant``. ``metric_kw``: fields of ``CollapseOptions`` (cdnv_exponent, ...)."""
  h, w = optimal_factorisation(lang, variant)
  st = population_stats(lang, h, w)
  counts = np.where(st["mass"] > 0, POPULATION_COUNT, 0).astype(np.int64)
  out = C.collapse_metrics_from_stats(st["means"], st["variances"], counts, w,
                                      options=C.CollapseOptions(min_count=1, **metric_kw)).to_dict()
  seen = st["mass"] > 0
  per_class = (st["q"].T @ st["hits"])[seen] / st["mass"][seen]
  out.update(nc4_agreement=float(lang.stationary @ st["hits"]),
             nc4_agreement_per_class=float(per_class.mean()), width=int(h.shape[1]),
             entropy=float(lang.entropy), variant=variant)
  return out


def ceiling_table(vocab: int, ranks, *, alpha: float = 4.0, zipf: float = 1.0, seed: int = 0,
                  variants=VARIANTS) -> list[dict]:
  """One row per (planted rank k, variant): the language's parameters and its ceiling."""
  rows = []
  for k in ranks:
    lang = PlantedLanguage(vocab=vocab, rank=int(k), alpha=alpha, zipf=zipf, seed=seed)
    for v in variants:
      rows.append({"vocab": vocab, "planted_rank": int(k), "alpha": alpha, "zipf": zipf,
                   "seed": seed, **ceiling_metrics(lang, v)})
  return rows
