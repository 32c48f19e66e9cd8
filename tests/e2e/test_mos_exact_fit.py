"""A MoS head fitted alone on the exact distributions of a planted MoS language beats every
rank-r head with no more head parameters (their exact floors), at the same width d.

V = 64, k = 3, M = 4, α = 8, d = 4 (a rank-r head is limited to r ≤ d = 4; lowrank(4) has
272 head parameters, the MoS head with e = k+1 = 4 has 356). Measured (notes/18.md): MoS fit
− H = 0.020–0.032 over three seeds, floor(4) − H = 0.0966. The fit from a random init does
not reach H to 1e-3 (the exact parameters do: tests/unit/test_planted_mos.py)."""

from sbjax.config import ModelConfig
from sbjax.data.planted_mos import PlantedMoS
from sbjax.studies import floor as fl
from sbjax.studies import head_fit as hf


def test_mos_fit_beats_the_matched_lowrank_floors():
  V, k, M, d = 64, 3, 4, 4
  lang = PlantedMoS(V, k, alpha=8.0, n_mix=M, seed=0)
  mc = ModelConfig(vocab_size=V, d_model=d, n_heads=1, pos="learned", head="mos", n_mix=M,
                   mos_dim=k + 1, mos_act="linear", init_std=0.2)
  fit = hf.fit_head(lang, mc, steps=3000, lr=0.1, seed=0)
  assert fit.params == V * (k + 1) + M * d * (k + 1) + M * (k + 1) + M * d + M
  assert fit.params >= V * d + d * d  # every rank r <= d has no more head parameters
  floor = fl.floor_curve(lang, [d], max_iter=3000, restarts=2)[0]  # floor(r) >= floor(d), r <= d
  assert floor.converged and floor.gap > 0.08
  assert 0 <= fit.gap < floor.gap - 0.05, (fit.gap, floor.gap)
