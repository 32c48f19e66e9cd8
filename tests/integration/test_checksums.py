"""Checksummed checkpoints (issue 34): every file of a step is hashed into a manifest once the
step is final (sync and async saves), verified at restore; one flipped byte is caught, the
step is set aside like any corrupt step, and training goes on from the previous good step.
Steps written before manifests existed are still accepted."""

import hashlib
import json
import logging
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.model import Model
from sbjax.train import read_metrics, train
from tests._damage import MANIFEST, flip_one_byte
from tests._damage import largest_data_file as _largest_data_file
from tests._tiny import TINY_RUN_STEPS, tiny_dataset, tiny_run_config

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

STEPS = 24


def _sha256_tree(d: Path) -> dict:
  """{relative path: sha256} of every file under ``d`` but the manifest (the reference)."""
  return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(d.rglob("*")) if p.is_file() and p.name != MANIFEST}


def _abstract(cfg):
  return ckpt.abstract_with_shardings(Model(cfg.model).abstract_params())


def test_one_flipped_byte_is_set_aside_and_training_resumes(tiny_run, tmp_path, caplog):
  ref = tiny_run
  wd = tmp_path / "run"
  shutil.copytree(ref, wd)
  f = _largest_data_file(wd / "checkpoints" / "24")
  flip_one_byte(f)
  damaged = _sha256_tree(wd / "checkpoints" / "24")
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    out = train(tiny_run_config(), wd, dataset=tiny_dataset(tiny_run_config().train.data_seed),
                quiet=True)
  msgs = [r.getMessage() for r in caplog.records]
  named = [m for m in msgs if "checkpoint step 24 in" in m and "moved it aside" in m]
  assert named and "checksum" in named[0] and f.name in named[0], msgs
  assert out["start_step"] == 16 and out["moved_aside"] == [24] and out["step"] == STEPS
  bad = list((wd / "checkpoints_bad").iterdir())
  assert len(bad) == 1 and bad[0].name.startswith("24_")
  assert _sha256_tree(bad[0]) == damaged  # set aside byte for byte
  # the rerun of steps 17..24 wrote a new, sealed step 24 whose parameters are the reference's
  assert ckpt.list_steps(wd) == TINY_RUN_STEPS
  assert ckpt.verify_step(wd, 24) is True
  _, a, _ = ckpt.load_params(wd, STEPS)
  _, b, _ = ckpt.load_params(ref, STEPS)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-5)
  la = [(r["step"], r["loss"]) for r in read_metrics(wd) if "loss" in r]
  assert la == [(r["step"], r["loss"]) for r in read_metrics(ref) if "loss" in r]


def _tree(n: int):
  return {"w": np.arange(n, dtype=np.float32).reshape(-1, 4), "b": np.ones(4, np.float32)}


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_manifest_lists_every_file_once_the_step_is_final(async_save, tmp_path):
  """Each step's manifest holds the size and sha256 of every file of the final step
  directory (hashlib over the files: the reference). An asynchronous save is sealed only
  once orbax has finished it: at the next save, wait_until_finished or close."""
  mngr = ckpt.make_manager(tmp_path, async_save=async_save)
  for step in (0, 1, 2):
    assert ckpt.save(mngr, step, _tree(16 * (step + 1)), None, {"step": step})
    d = tmp_path / "checkpoints" / str(step)
    if async_save:  # the step just started may still be written: no manifest yet
      assert not (d / MANIFEST).exists()
    else:
      assert (d / MANIFEST).is_file()
    if step:  # the previous step is final (orbax's save waits for it): sealed
      assert (tmp_path / "checkpoints" / str(step - 1) / MANIFEST).is_file()
  mngr.close()
  for step in (0, 1, 2):
    d = tmp_path / "checkpoints" / str(step)
    m = json.loads((d / MANIFEST).read_text())
    assert m["algorithm"] == "sha256"
    want = _sha256_tree(d)
    assert {k: v[1] for k, v in m["files"].items()} == want and ckpt.COMMIT_FILE in want
    assert {k: v[0] for k, v in m["files"].items()} == {
        k: (d / k).stat().st_size for k in want}
    assert ckpt.verify_step(tmp_path, step) is True


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_verify_names_the_damaged_file(damage, tmp_path):
  mngr = ckpt.make_manager(tmp_path)
  ckpt.save(mngr, 0, _tree(64), None, {"step": 0})
  mngr.close()
  d = tmp_path / "checkpoints" / "0"
  f = _largest_data_file(d)
  rel = f.relative_to(d).as_posix()
  if damage == "flip":
    flip_one_byte(f)
    needle = f"checksum mismatch in {rel}"
  elif damage == "truncate":
    f.write_bytes(f.read_bytes()[:-1])
    needle = f"{rel} has {f.stat().st_size} bytes"
  elif damage == "delete":
    f.unlink()
    needle = f"{rel} is missing"
  else:
    (d / MANIFEST).write_text('{"files": ')
    needle = f"{d / MANIFEST} is unreadable"
  with pytest.raises(ckpt.CorruptCheckpointError, match="failed its checksum check") as e:
    ckpt.verify_step(tmp_path, 0)
  assert needle in str(e.value)
  # the params alone (what the analysis reads) are checked too; the opt item is not read
  if damage != "manifest":
    with pytest.raises(ckpt.CorruptCheckpointError, match="checkpoint step 0 in"):
      ckpt.ParamsReader(tmp_path, _abstract_of(_tree(64))).read([0])


def _abstract_of(tree):
  return ckpt.abstract_with_shardings(tree)


def test_step_without_manifest_is_accepted_unverified(tiny_run, tmp_path, caplog):
  """A step written before manifests existed restores as before, logged as unverified."""
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  (wd / "checkpoints" / "24" / MANIFEST).unlink()
  assert ckpt.verify_step(wd, 24) is False
  cfg = tiny_run_config()
  with caplog.at_level(logging.INFO, logger="sbjax"):
    out = ckpt.restore_latest_good(wd, _abstract(cfg))
  assert any(f"checkpoint step 24 in {wd} has no {MANIFEST}" in r.getMessage()
             and "restored unverified" in r.getMessage() for r in caplog.records)
  assert out is not None and out[0] == 24 and out[3]["step"] == 24
  assert not (wd / "checkpoints_bad").exists()


def test_load_params_refuses_a_flipped_byte_naming_the_step(tiny_run, tmp_path):
  wd = tmp_path / "run"
  shutil.copytree(tiny_run, wd)
  flip_one_byte(_largest_data_file(wd / "checkpoints" / "16"))
  with pytest.raises(ckpt.CorruptCheckpointError,
                     match=r"checkpoint step 16 in .* failed its checksum check: checksum "
                           r"mismatch in params/.*use another step"):
    ckpt.load_params(wd, 16)
