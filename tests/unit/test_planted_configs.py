"""The planted experiment's configs: every preset builds, bias-free heads, the matched lowrank rank."""

import pytest

from experiments.planted import PRESETS
from experiments.planted.configs import arm_of, knee_configs, mix_configs, validate
from sbjax.heads import head_param_count
from sbjax.heads.lowrank import LowRankHead


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_builds_and_lowrank_matches_mos(name):
  p = PRESETS[name]
  validate(p)  # every config, nothing run
  for r, cfg in knee_configs(p):
    assert cfg.model.head == LowRankHead(rank=r)
  arms = {arm_of(c): c for _, c in mix_configs(p)}
  mos = next(c for c in arms.values() if c.model.head.kind == "mos")
  for c in arms.values():
    if c.model.head.kind == "lowrank" and c.model.rank < c.model.d_model:
      v, d = c.model.vocab_size, c.model.d_model
      assert abs(head_param_count(c.model) - head_param_count(mos.model)) <= (v + d) / 2
