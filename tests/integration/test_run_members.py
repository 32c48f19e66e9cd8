"""A run of N = 2 members (sbjax.train.train with lists), one reference population whose
members differ in seed, data seed, lr and weight decay: resume after an interruption and
after a corrupt newest checkpoint in one member's workdir, bit for bit equal to the
uninterrupted run; each member equals its separate run, and the in-memory run's snapshots
equal the checkpoints; a frozen trunk from another run; "train unless done" marks every
member; a NaN stop names the member and the skip option; members that differ in a program
field are refused. (Checkpoints every 8 steps, not the tiny run's 8 log-spaced ones: orbax's
saves are most of a tiny run's time, and 8 and 16 are the steps the resumes need.) (N = 1: tests/integration/test_train.py, test_checkpoint_corrupt.py; N = 3 through
the command line against separate runs: tests/e2e/test_population.py.)"""

import dataclasses
import logging
import shutil

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import heads
from sbjax.train import (NonFiniteLossError, member_configs, member_dir, read_metrics, train,
                         train_once)
from sbjax.train import hooks as H
from sbjax.train.done import finished
from tests._tiny import tiny_dataset, tiny_run_config

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

# the session's tiny_run (24 steps) but for when it saves (a loop-only field: same programs)
CFG = tiny_run_config(ckpt_log_spaced=False, ckpt_every=8)
STEPS = [0, 8, 16, 24]
# member 0 is the tiny_run; member 1 has its own init, data order, lr and weight decay
MEMBERS = [CFG, CFG.replace(train=dataclasses.replace(CFG.train, seed=1, data_seed=1,
                                                      lr=CFG.train.lr / 3, weight_decay=0.0))]


def _data():
  return [tiny_dataset(0), tiny_dataset(1)]


def _dirs(root):
  return [member_dir(root, i) for i in range(2)]


def _leaves(wd, step):
  return [np.asarray(x) for x in jax.tree.leaves(ckpt.load_params(wd, step)[1])]


def _losses(wd):
  return [(r["step"], r["loss"]) for r in read_metrics(wd) if "loss" in r]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
  """The uninterrupted run of the two members (read-only: tests copy it)."""
  root = tmp_path_factory.mktemp("members") / "ref"
  sums = train(MEMBERS, _dirs(root), dataset=_data(), quiet=True)
  assert [s["lr"] for s in sums] == [m.train.lr for m in MEMBERS]
  assert [ckpt.list_steps(d) for d in _dirs(root)] == [STEPS] * 2
  return root


def _assert_same_run(root, ref_root):
  for a, b in zip(_dirs(root), _dirs(ref_root)):
    assert ckpt.list_steps(a) == STEPS
    assert _losses(a) == _losses(b) and len(_losses(a)) == CFG.train.steps
    for x, y in zip(_leaves(a, CFG.train.steps), _leaves(b, CFG.train.steps)):
      np.testing.assert_array_equal(x, y)


def test_stop_and_resume_equals_uninterrupted_run_bitwise(ref, tmp_path):
  part = train(MEMBERS, _dirs(tmp_path), dataset=_data(), stop_after=10, quiet=True)
  assert [s["step"] for s in part] == [10, 10]
  resumed = train(MEMBERS, _dirs(tmp_path), dataset=_data(), quiet=True)
  assert [s["start_step"] for s in resumed] == [8, 8]
  _assert_same_run(tmp_path, ref)
  # the members differ (seed and lr), and each is a normal workdir of its own config
  assert _losses(member_dir(tmp_path, 0)) != _losses(member_dir(tmp_path, 1))
  assert [ckpt.load_config(d) for d in _dirs(tmp_path)] == MEMBERS


def test_corrupt_newest_step_of_one_member_is_set_aside(ref, tmp_path, caplog):
  """Member 1's newest step is truncated: it is moved aside as bad, member 0's (good but
  ahead) too, and both continue from step 16 to the undamaged run."""
  root = tmp_path / "run"
  shutil.copytree(ref, root)
  d = ckpt.ckpt_dir(member_dir(root, 1)) / "24" / "params" / "ocdbt.process_0" / "d"
  f = max((p for p in d.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
  with open(f, "r+b") as fh:
    fh.truncate(f.stat().st_size // 2)
  with caplog.at_level(logging.WARNING, logger="sbjax"):
    out = train(MEMBERS, _dirs(root), dataset=_data(), quiet=True)
  msgs = [r.getMessage() for r in caplog.records]
  assert any("checkpoint step 24 in" in m and "member_1" in m and "moved it aside" in m
             for m in msgs), msgs
  assert any("member_0" in m and "newer than step 16" in m for m in msgs), msgs
  assert [s["start_step"] for s in out] == [16, 16]
  assert [s["moved_aside"] for s in out] == [[24], [24]]
  for m in _dirs(root):
    (bad,) = (m / "checkpoints_bad").iterdir()
    assert bad.name.startswith("24_")
  _assert_same_run(root, ref)


def test_members_equal_separate_runs_and_snapshots_equal_checkpoints(ref, tiny_run, tmp_path):
  """Member 0 equals the session's tiny_run (seed 0, data seed 0, λ 0.1), member 1 its own
  separate run (seed 1, data seed 1, lr / 3, λ 0): float32 reassociation of the vmapped step
  and the scaled update, 1e-5. The in-memory run's snapshots equal the checkpoints bit for
  bit."""
  train(MEMBERS[1], tmp_path / "sep_1", dataset=_data()[1], quiet=True)
  for mem, sep in zip(_dirs(ref), (tiny_run, tmp_path / "sep_1")):
    la, lb = _losses(mem), _losses(sep)
    assert [s for s, _ in la] == [s for s, _ in lb] and len(la) == CFG.train.steps
    np.testing.assert_allclose([v for _, v in la], [v for _, v in lb], rtol=0, atol=1e-5)
    for x, y in zip(_leaves(mem, 24), _leaves(sep, 24)):
      np.testing.assert_allclose(x, y, rtol=0, atol=1e-5)
  assert _losses(member_dir(ref, 0)) != _losses(member_dir(ref, 1))  # the members differ
  snaps = H.Snapshots()
  sums = train(MEMBERS, None, dataset=_data(), snapshot_steps=[8, 24], hooks=[snaps], quiet=True)
  assert sorted(snaps.snaps) == [8, 24] and [s["step"] for s in sums] == [24, 24]
  for step in (8, 24):
    for j, mem in enumerate(_dirs(ref)):
      got = [np.asarray(x)[j] for x in jax.tree.leaves(snaps.snaps[step])]
      for x, y in zip(got, _leaves(mem, step)):
        np.testing.assert_array_equal(x, y)


def test_frozen_trunk_population_and_train_once(tiny_run, tmp_path):
  """Members accept train.freeze_trunk / init_from as a single run does; train_once marks
  every member finished and then reads them back."""
  tc = dataclasses.replace(CFG.train, steps=2, eval_every=2, ckpt_every=2, freeze_trunk=True,
                           init_from=str(tiny_run))
  cfgs = member_configs(CFG.replace(train=tc), n=2)
  dirs = _dirs(tmp_path)
  sums = train_once(cfgs, dirs, dataset=tiny_dataset())
  assert all(finished(d) is not None for d in dirs) and [s["step"] for s in sums] == [2, 2]
  src = ckpt.load_params(tiny_run)[1]
  (head_key,) = heads.get(CFG.model.head).param_keys
  trained = []
  for d in dirs:
    p = ckpt.load_params(d)[1]
    for k in set(src) - {head_key}:
      for x, y in zip(jax.tree.leaves(p[k]), jax.tree.leaves(src[k])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    trained.append(jax.tree.leaves(p[head_key]))
  assert not np.array_equal(trained[0][0], trained[1][0])  # the heads' inits differ (seeds 0, 1)
  assert train_once(cfgs, dirs, dataset=tiny_dataset()) == sums  # read back, not trained


def test_nan_stop_names_the_member_its_last_checkpoint_and_the_skip_option(tmp_path):
  with pytest.raises(NonFiniteLossError, match=r"^member 0 \(seed 0, lr 0.003\): non-finite "
                     r"loss or gradient .* at step 9; .*skip_nonfinite_steps=N") as e:
    train(MEMBERS, _dirs(tmp_path), dataset=_data(), quiet=True, nan_at_step=9)
  assert "The last good checkpoint is step 8 in" in str(e.value)
  assert [ckpt.list_steps(d) for d in _dirs(tmp_path)] == [[0, 8]] * 2


def test_members_that_differ_in_a_program_field_are_refused(tmp_path):
  other = CFG.replace(model=dataclasses.replace(CFG.model, d_model=64))
  with pytest.raises(ValueError, match=r"member 1 differs from member 0 in \['model.d_model'\]"):
    train([CFG, other], _dirs(tmp_path), dataset=tiny_dataset(), quiet=True)
  seeds = [CFG, CFG.replace(train=dataclasses.replace(CFG.train, data_seed=1))]
  with pytest.raises(ValueError, match="one per member"):
    train(seeds, _dirs(tmp_path), dataset=tiny_dataset(), quiet=True)
  with pytest.raises(ValueError, match="one workdir per member"):
    train(MEMBERS, [tmp_path], dataset=_data(), quiet=True)
  with pytest.raises(ValueError, match=r"snapshot_steps are for a run in memory \(workdirs=None\)"):
    train(MEMBERS, _dirs(tmp_path), dataset=_data(), snapshot_steps=[2], quiet=True)
