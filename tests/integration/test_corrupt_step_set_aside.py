"""A corrupt checkpoint step is named and set aside at restore, and the previous good step is
used: one flipped byte in the newest step of a real run (orbax on disk), found by the step's
SHA-256 manifest, which every finished step carries, synchronous or asynchronous saves."""

import json
import logging
import shutil

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.model import Model
from tests._damage import MANIFEST, flip_one_byte, largest_data_file
from tests._tiny import TINY_RUN_STEPS, tiny_run_config

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]


def test_a_flipped_byte_sets_the_step_aside_and_the_previous_step_is_restored(
    tiny_run, tmp_path, caplog):
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  bad, good = TINY_RUN_STEPS[-1], TINY_RUN_STEPS[-2]
  flip_one_byte(largest_data_file(wd / "checkpoints" / str(bad)))
  cfg = tiny_run_config()
  abstract = ckpt.abstract_with_shardings(Model(cfg.model).abstract_params(cfg.train.seq_len))
  moved = []
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    step, params, _, meta = ckpt.restore_latest_good(wd, abstract, moved=moved)
  assert (step, meta["step"], moved) == (good, good, [bad])
  [line] = [r.getMessage() for r in caplog.records if r.name == "sbjax"]
  assert line.startswith(f"checkpoint step {bad} in {wd} is bad (") and "checksum mismatch" in line
  [aside] = (wd / "checkpoints_bad").iterdir()
  assert aside.name.startswith(f"{bad}_") and ckpt.list_steps(wd) == TINY_RUN_STEPS[:-1]
  want = ckpt.restore(tiny_run, good, abstract)[0]
  for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
    assert np.array_equal(np.asarray(x), np.asarray(y))


def test_every_finished_step_of_asynchronous_saves_lists_each_of_its_files(tmp_path):
  """(Synchronous saves: the run above.)"""
  cfg = tiny_run_config()
  params = Model(cfg.model).abstract_params(cfg.train.seq_len)
  params = jax.tree.map(lambda x: np.ones(x.shape, x.dtype), params)
  mngr = ckpt.make_manager(tmp_path, async_save=True)
  for step in (0, 1, 2):
    ckpt.save(mngr, step, params, None, {"step": step})
  ckpt.finish(mngr)
  for step in (0, 1, 2):
    d = ckpt.ckpt_dir(tmp_path) / str(step)
    files = json.loads((d / MANIFEST).read_text())["files"]
    on_disk = {p.relative_to(d).as_posix(): p.stat().st_size for p in d.rglob("*")
               if p.is_file() and p.name != MANIFEST}
    assert {r: e[0] for r, e in files.items()} == on_disk
    assert ckpt.verify_step(tmp_path, step) is True
