"""Fixtures of the bad-input tables: the tiny data set, a three-checkpoint workdir, its HF export."""

import json

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from tests._tiny import tiny_dataset
from tests.integration.test_bad_inputs import tiny_cfg


@pytest.fixture(scope="module")
def ds():
  return tiny_dataset()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  """A workdir as `train` leaves it: config.json and orbax checkpoints 0, 1, 2 (params, opt,
  meta). Written with sbjax.checkpoint directly (no training: nothing to compile)."""
  import jax

  from sbjax.model import Model
  from sbjax.optim import make_optimizer

  wd = tmp_path_factory.mktemp("bad_inputs") / "run"
  wd.mkdir()
  cfg = tiny_cfg()
  (wd / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
  model = Model(cfg.model)
  mngr = ckpt.make_manager(wd, cfg.train)
  rng = np.random.default_rng(0)
  for step in (0, 1, 2):  # random values of the model's shapes (no init to compile)
    params = jax.tree.map(lambda x: jax.numpy.asarray(0.02 * rng.normal(size=x.shape), x.dtype),
                          model.abstract_params(cfg.train.seq_len))
    opt = make_optimizer(cfg.train, cfg.model, params).init(params)
    ckpt.save(mngr, step, params, opt, {"step": step, "data_position": step})
  mngr.wait_until_finished()
  mngr.close()
  assert ckpt.list_steps(wd) == [0, 1, 2]
  return wd


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, run_dir):
  """The tiny run exported to a Hugging Face directory (safetensors), by sbjax itself."""
  from sbjax.convert import export_hf

  out = tmp_path_factory.mktemp("hf") / "tiny"
  cfg, params, _ = ckpt.load_params(run_dir)
  export_hf(cfg.model, params, str(out))
  return out
