"""Heads of different ranks as ONE population (``sbjax.heads.padded_lowrank``): frozen-trunk
padded heads of ranks 2 and 4 (pad 4, head lrs 3e-3 and 1e-2) train in one compiled step; the
padded rank-2 member equals the separate ``lowrank`` run (the plain single-run code path) in
every step's loss and in the trained head product A·B, to float32 tolerance, and its padding
stays exactly zero. Members that differ in a lowrank head's rank, or in a padded head's pad,
are refused with the fix named."""

import dataclasses
import logging

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax.heads.padded_lowrank import padding_is_zero
from sbjax.train import member_dir, read_metrics, train
from tests._tiny import tiny_dataset, tiny_run_config

GRID, STEPS = ((2, 3e-3), (4, 1e-2)), 6  # (rank, lr) of each member


def _cfg(trunk, head, lr):
  cfg = tiny_run_config(steps=STEPS, eval_every=STEPS, ckpt_every=STEPS, ckpt_log_spaced=False,
                        freeze_trunk=True, init_from=str(trunk), lr=lr, warmup_steps=1)
  return cfg.replace(model=dataclasses.replace(cfg.model, head=head))


def _losses(wd):
  return [r["loss"] for r in read_metrics(wd) if "loss" in r]


def _product(wd):
  """(A·B, whether a padded head's padding is still exactly zero) of the trained head."""
  cfg, params, _ = ckpt.load_params(wd)
  padded = cfg.model.head.kind == "padded_lowrank"
  return (np.asarray(heads.head_matrix(params, cfg.model)),
          padding_is_zero(params, cfg.model) if padded else True)


def test_padded_population_equals_separate_lowrank_runs(tiny_run, tmp_path, caplog):
  cfgs = [_cfg(tiny_run, heads.head_config("padded_lowrank", rank=r, pad=4), lr)
          for r, lr in GRID]
  dirs = [member_dir(tmp_path / "pop", i) for i in range(len(GRID))]
  with caplog.at_level(logging.DEBUG, logger="jax"), jax.log_compiles(True):
    train(cfgs, dirs, dataset=tiny_dataset(), quiet=True)
  names = [r.getMessage().split()[1] for r in caplog.records
           if r.getMessage().startswith("Compiling ")]
  # one train-step program for the members (``state_step`` names it), one evaluation
  assert names.count("jit(train_step)") == 1 and names.count("jit(eval_step)") == 1, names
  (r, lr), sep = GRID[0], tmp_path / "sep"
  train(_cfg(tiny_run, heads.head_config("lowrank", rank=r), lr), sep, dataset=tiny_dataset(),
        quiet=True)
  la, lb = _losses(dirs[0]), _losses(sep)
  assert len(la) == STEPS == len(lb)
  np.testing.assert_allclose(la, lb, rtol=0, atol=2e-5)
  (wa, zero), (wb, _) = _product(dirs[0]), _product(sep)
  assert zero, "the padding is no longer zero"
  assert np.linalg.matrix_rank(wb) == r
  np.testing.assert_allclose(wa, wb, rtol=0, atol=2e-5)
  assert _losses(dirs[0]) != _losses(dirs[1])  # the members differ


def test_members_differing_in_head_shape_are_refused(tmp_path):
  cfg = tiny_run_config()
  low = [cfg.replace(model=dataclasses.replace(cfg.model, head=heads.head_config(
      "lowrank", rank=r))) for r in (2, 4)]
  with pytest.raises(ValueError, match=r"differs from member 0 in \['model.head.rank'\].*use "
                     r"head padded_lowrank with pad=4"):
    train(low, [member_dir(tmp_path, i) for i in range(2)], dataset=tiny_dataset(), quiet=True)
  pads = [cfg.replace(model=dataclasses.replace(cfg.model, head=heads.head_config(
      "padded_lowrank", rank=2, pad=p))) for p in (2, 4)]
  with pytest.raises(ValueError, match=r"in \['model.head.pad'\].*train them as separate runs"):
    train(pads, [member_dir(tmp_path, i) for i in range(2)], dataset=tiny_dataset(), quiet=True)


def test_padded_head_config_is_checked():
  cfg = tiny_run_config()
  for bad, name in (({"rank": 5, "pad": 4}, "rank"), ({"rank": 2, "pad": 64}, "pad")):
    with pytest.raises(ValueError, match=rf"model\.head\.{name}=.*1 <= rank <= pad <= d_model"):
      dataclasses.replace(cfg.model, head=heads.head_config("padded_lowrank", **bad))
