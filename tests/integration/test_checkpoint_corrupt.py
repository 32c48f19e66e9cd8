"""Corrupt and partial checkpoints are found at resume, named in the log, moved aside (never
deleted), and training continues from the newest good step, ending bitwise equal to a run
that was never damaged. Also: the checkpoint before a NaN stop resumes cleanly."""

import hashlib
import logging
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.train import NonFiniteLossError, read_metrics, train
from tests._tiny import TINY_RUN_STEPS, tiny_dataset, tiny_run_config

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

# checkpoints at 0, 1, 2, 4, 8 (log-spaced), 12 (ckpt_every), 16, 24 (final); the same
# compiled step as tests/test_train.py's resume test (shared persistent compilation cache)
STEPS = 24
ALL = TINY_RUN_STEPS  # [0, 1, 2, 4, 8, 12, 16, 24]
tiny_cfg = tiny_run_config  # the tiny preset, vocab 64, 24 steps, evaluations at 0, 12, 24


@pytest.fixture(scope="module")
def ds():
  return tiny_dataset(tiny_cfg().train.data_seed)


@pytest.fixture(scope="module")
def ref(tiny_run):
  """An undamaged run (the reference): the session's shared run (tests/conftest.py), of
  this file's config; kept read-only by the tests (they copy it)."""
  assert ckpt.load_config(tiny_run) == tiny_cfg()
  assert ckpt.list_steps(tiny_run) == ALL
  return tiny_run


def _files(root: Path) -> dict:
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(root.rglob("*")) if p.is_file()}


def _data_files(step_dir: Path, item: str) -> list:
  """The array data files of an item (OCDBT), largest first."""
  fs = [p for p in (step_dir / item / "ocdbt.process_0" / "d").iterdir() if p.is_file()]
  return sorted(fs, key=lambda p: -p.stat().st_size)


def truncate_file(step_dir: Path) -> None:
  f = _data_files(step_dir, "params")[0]
  with open(f, "r+b") as fh:
    fh.truncate(f.stat().st_size // 2)


def delete_array_shard(step_dir: Path) -> None:
  _data_files(step_dir, "opt")[0].unlink()


def half_written_step_dir(step_dir: Path) -> None:
  """What a copy cut short, or a kill under orbax's commit-file mode (GCS), leaves: a step
  directory with some items and no commit_success.txt."""
  (step_dir / ckpt.COMMIT_FILE).unlink()
  shutil.rmtree(step_dir / "opt")


CORRUPTIONS = {"truncated_file": truncate_file, "deleted_array_shard": delete_array_shard,
               "half_written_step_dir": half_written_step_dir}


def _params(wd, step):
  _, p, _ = ckpt.load_params(wd, step)
  return [np.asarray(x) for x in jax.tree.leaves(p)]


def _assert_final_params_equal(wd, ref):
  """The final parameters of ``wd`` equal the undamaged run's. Steps 0..4 of the shared run
  come from the step program with the NaN hook compiled in, a different XLA program from the
  clean run's: equal to it bit for bit at XLA's default optimisation level, to float rounding
  (measured: 1.7e-6) at the -O0 of tests/conftest.py. Bitwise resume with one program is
  tests/integration/test_train.py's and the soak's."""
  exact = "xla_backend_optimization_level=0" not in os.environ.get("XLA_FLAGS", "")
  for a, b in zip(_params(wd, STEPS), _params(ref, STEPS)):
    if exact:
      np.testing.assert_array_equal(a, b)
    else:
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_newest_step_is_moved_aside_and_run_resumes(kind, ref, ds, tmp_path, caplog):
  wd = tmp_path / "run"
  shutil.copytree(ref, wd)
  CORRUPTIONS[kind](wd / "checkpoints" / "24")
  damaged = _files(wd / "checkpoints" / "24")
  others = _files(wd)
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    out = train(tiny_cfg(), wd, dataset=ds, quiet=True)
  # the log names the bad step; the run resumed from the newest good one
  assert any("checkpoint step 24 in" in r.getMessage() and "moved it aside" in r.getMessage()
             for r in caplog.records), [r.getMessage() for r in caplog.records]
  assert out["start_step"] == 16 and out["moved_aside"] == [24] and out["step"] == STEPS
  # moved aside, byte for byte, never deleted
  bad = list((wd / "checkpoints_bad").iterdir())
  assert len(bad) == 1 and bad[0].name.startswith("24_")
  assert _files(bad[0]) == damaged
  # every other file of the workdir is still there, unchanged (metrics.jsonl only grew)
  after = _files(wd)
  for rel, h in others.items():
    if rel.startswith("checkpoints/24/") or rel == "metrics.jsonl":
      continue
    assert after.get(rel) == h, f"{rel} was changed or deleted"
  # and the continued run is the undamaged run, bit for bit
  assert ckpt.list_steps(wd) == ALL
  _assert_final_params_equal(wd, ref)
  la = [(r["step"], r["loss"]) for r in read_metrics(wd) if "loss" in r]
  assert la == [(r["step"], r["loss"]) for r in read_metrics(ref) if "loss" in r]


def test_unfinished_orbax_save_and_partial_log_line(ref, ds, tmp_path, caplog):
  """A kill mid-save leaves `<step>.orbax-checkpoint-tmp-*`; a kill mid-write leaves a
  partial metrics.jsonl line. Both are handled at resume."""
  wd = tmp_path / "run"
  shutil.copytree(ref, wd)
  tmp = wd / "checkpoints" / "24.orbax-checkpoint-tmp-1234567"
  (wd / "checkpoints" / "24").rename(tmp)
  shutil.rmtree(tmp / "opt")
  half = _files(tmp)
  with open(wd / "metrics.jsonl", "a") as f:
    f.write('{"step": 23, "loss": 2.')
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    out = train(tiny_cfg(), wd, dataset=ds, quiet=True)
  msgs = " | ".join(r.getMessage() for r in caplog.records)
  assert "moved aside an unfinished checkpoint save: 24.orbax-checkpoint-tmp-1234567" in msgs
  assert "partial line" in msgs
  assert out["start_step"] == 16
  bad = list((wd / "checkpoints_bad").iterdir())
  assert len(bad) == 1 and bad[0].name.startswith("24.orbax-checkpoint-tmp-1234567_")
  assert _files(bad[0]) == half
  lines = (wd / "metrics.jsonl").read_text().splitlines()
  assert all(line.startswith("{") and line.endswith("}") for line in lines)
  _assert_final_params_equal(wd, ref)


def test_all_steps_bad_starts_over_and_keeps_them(ref, ds, tmp_path):
  wd = tmp_path / "run"
  shutil.copytree(ref, wd)
  for s in ckpt.list_steps(wd):
    (wd / "checkpoints" / str(s) / ckpt.COMMIT_FILE).unlink()
  out = train(tiny_cfg(), wd, dataset=ds, quiet=True)
  assert out["start_step"] == 0 and sorted(out["moved_aside"]) == ALL
  assert len(list((wd / "checkpoints_bad").iterdir())) == len(ALL)
  _assert_final_params_equal(wd, ref)


def test_checkpoint_before_nan_resumes_to_the_clean_run(ref, ds, tmp_path):
  wd = tmp_path / "run"
  with pytest.raises(NonFiniteLossError, match=r"at step 5;.*last good checkpoint is step 4"):
    train(tiny_cfg(), wd, dataset=ds, quiet=True, nan_at_step=5)
  assert ckpt.list_steps(wd) == [0, 1, 2, 4]
  # the hook is not part of the config (config.json is the clean run's): rerun without it
  out = train(tiny_cfg(), wd, dataset=ds, quiet=True)
  assert out["start_step"] == 4 and out["moved_aside"] == []
  _assert_final_params_equal(wd, ref)
