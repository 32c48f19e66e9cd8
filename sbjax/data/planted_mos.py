r"""A planted mixture-of-softmaxes language: a MoS head of component dimension k+1 is exact.

``PlantedMoS`` (``source="planted_mos"``) is a Markov chain of order ``context`` over V
tokens (contexts indexed as in ``sbjax.data.planted``) with

    P(w | c) = Σ_m π_{c,m} softmax_w( α (R_m u_c)·y_w / √k + b_w ),

* one **shared** output embedding ``Y`` (V×k, rows ``y_w ~ N(0, I_k)``) and the Zipf bias
  ``b_w = −s log(w + 1)`` (token id order is the frequency rank);
* context vectors ``u_c ~ N(0, I_k)``; ``M = n_mix`` random orthogonal k×k rotations ``R_m``
  (Haar, the QR of a Gaussian matrix with the signs of diag(R) fixed);
* gates ``π_{c,m}``: ``"uniform"`` (1/M for every context) or ``"dirichlet"``
  (``π_c ~ Dir(β 1_M)`` drawn per context, β = ``gate_conc``).

Exact representation by a MoS head with component dimension ``e = k + 1`` (shared W, linear
component maps): ``W = [α Y/√k, b]`` (V×(k+1)), component features
``g_m(c) = [R_m u_c, 1]``, so that component logits are ``W g_m(c)``, and the prior
``log π_c`` (``mos_parameters``). Each component's logit matrix has rank ≤ k + 1, but the log
of the mixture is not low rank: the π-weighted, row-centred log P has a numerical rank near
min(C, V) (seed 0, V = 256, M = 8, α = 8: 255 at k = 8, H = 2.731 nats; 255 at k = 4, H =
2.658 nats, the planted presets' part 2; ranks at 1e-10 of the largest singular value).

Exposes ``log_probs``/``probs`` (C×V, float64), ``stationary``, ``entropy`` and ``sample``
exactly as the other planted languages (the shared ``_MarkovLanguage`` machinery).
"""

from __future__ import annotations

import math

import numpy as np

from sbjax.data.options import PLANTED_GATES as GATES
from sbjax.data.planted import _MarkovLanguage, _log_softmax, _logsumexp, _zipf_bias


def random_rotation(rng: np.random.Generator, k: int) -> np.ndarray:
  """A Haar-random orthogonal k×k matrix (QR of a Gaussian, column signs fixed by diag(R))."""
  q, r = np.linalg.qr(rng.standard_normal((k, k)))
  return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))[None, :]


class PlantedMoS(_MarkovLanguage):
  """A mixture of ``n_mix`` softmaxes sharing one output embedding (see the module doc)."""

  def __init__(self, vocab: int, rank: int, alpha: float = 8.0, zipf: float = 1.0,
               context: int = 1, n_mix: int = 8, gate: str = "uniform",
               gate_conc: float = 1.0, seed: int = 0):
    if gate not in GATES or not gate_conc > 0:
      raise ValueError(f"invalid PlantedMoS: gate={gate!r} ({' | '.join(GATES)}), "
                       f"gate_conc={gate_conc} (> 0)")
    self._set(vocab, rank, alpha, zipf, context, seed, n_mix)
    self.gate, self.gate_conc = gate, float(gate_conc)
    rng = np.random.default_rng([self.seed, 0x3054])
    C, M, k = self.n_contexts, self.n_mix, self.rank
    self.U = rng.standard_normal((C, k))
    self.Y = rng.standard_normal((self.vocab, k))
    self.R = np.stack([random_rotation(rng, k) for _ in range(M)])  # [M, k, k]
    if gate == "uniform":
      self.gates = np.full((C, M), 1.0 / M)
    else:
      self.gates = rng.dirichlet(np.full(M, self.gate_conc), size=C)
      self.gates = np.maximum(self.gates, 1e-300)
      self.gates /= self.gates.sum(1, keepdims=True)
    self.b = _zipf_bias(self.vocab, self.zipf)
    comp = _log_softmax(self.component_logits())  # [M, C, V]
    self.log_probs = _logsumexp(comp + np.log(self.gates).T[:, :, None], axis=0)
    self._finish()

  def component_features(self) -> np.ndarray:
    """``g_m(c) = [R_m u_c, 1]``: [M, C, k+1]."""
    ru = np.einsum("mij,cj->mci", self.R, self.U)
    ones = np.ones(ru.shape[:2] + (1,))
    return np.concatenate([ru, ones], axis=-1)

  def output_matrix(self) -> np.ndarray:
    """``W = [α Y/√k, b]``: [V, k+1], shared by the components."""
    return np.concatenate([self.alpha * self.Y / math.sqrt(self.rank), self.b[:, None]], axis=1)

  def component_logits(self) -> np.ndarray:
    """``α (R_m u_c)·y_w/√k + b_w`` = ``W g_m(c)``: [M, C, V]."""
    return np.einsum("mce,ve->mcv", self.component_features(), self.output_matrix())

  def mos_parameters(self) -> dict:
    """The exact MoS head: ``log P = logsumexp_m [log π_{c,m} + log_softmax(W g_m(c))]``.

    ``w`` [V, k+1], ``features`` [M, C, k+1], ``log_gates`` [C, M]."""
    return {"w": self.output_matrix(), "features": self.component_features(),
            "log_gates": np.log(self.gates)}

  def logit_matrix(self) -> np.ndarray:
    return self.log_probs.copy()

  def info(self) -> dict:
    return {"kind": "planted_mos", "rank": self.rank, "alpha": self.alpha, "zipf": self.zipf,
            "n_mix": self.n_mix, "gate": self.gate, "gate_conc": self.gate_conc,
            **super().info()}
