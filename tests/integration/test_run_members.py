"""A run of N = 2 members (sbjax.train.train with lists) whose members differ in seed, data
seed, lr and weight decay: stopped and resumed, it equals the uninterrupted run bit for bit;
each member equals its separate run; members that differ in a program field are refused.
(Checkpoints every 8 steps: the steps the resume needs; orbax's saves are most of a tiny
run's time.)"""

import dataclasses

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax.train import member_configs, member_dir, read_metrics, train
from tests._tiny import tiny_dataset, tiny_run_config

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


def test_members_equal_separate_runs(ref, tiny_run, tmp_path):
  """Member 0 equals the session's tiny_run (seed 0, data seed 0, λ 0.1), member 1 its own
  separate run (seed 1, data seed 1, lr / 3, λ 0): float32 reassociation of the vmapped step
  and the scaled update, 1e-5."""
  train(MEMBERS[1], tmp_path / "sep_1", dataset=_data()[1], quiet=True)
  for mem, sep in zip(_dirs(ref), (tiny_run, tmp_path / "sep_1")):
    la, lb = _losses(mem), _losses(sep)
    assert [s for s, _ in la] == [s for s, _ in lb] and len(la) == CFG.train.steps
    np.testing.assert_allclose([v for _, v in la], [v for _, v in lb], rtol=0, atol=1e-5)
    for x, y in zip(_leaves(mem, 24), _leaves(sep, 24)):
      np.testing.assert_allclose(x, y, rtol=0, atol=1e-5)
  assert _losses(member_dir(ref, 0)) != _losses(member_dir(ref, 1))  # the members differ


def test_members_that_differ_in_a_program_field_are_refused(tmp_path):
  other = CFG.replace(model=dataclasses.replace(CFG.model, d_model=64))
  with pytest.raises(ValueError, match=r"member 1 differs from member 0 in \['model.d_model'\]"):
    train([CFG, other], _dirs(tmp_path), dataset=tiny_dataset(), quiet=True)
  seeds = [CFG, CFG.replace(train=dataclasses.replace(CFG.train, data_seed=1))]
  with pytest.raises(ValueError, match="one per member"):
    train(seeds, _dirs(tmp_path), dataset=tiny_dataset(), quiet=True)
  with pytest.raises(ValueError, match="one workdir per member"):
    train(MEMBERS, [tmp_path], dataset=_data(), quiet=True)
  ms = member_configs(CFG, lrs=[1e-3, 2e-3])
  assert [m.train.seed for m in ms] == [0, 1] and [m.train.lr for m in ms] == [1e-3, 2e-3]
  assert [m.train.seed for m in member_configs(CFG, n=3)] == [0, 1, 2]
  with pytest.raises(ValueError, match="population size is ambiguous"):
    member_configs(CFG, n=3, lrs=[1e-3, 2e-3])
  with pytest.raises(ValueError, match=r"train.lr=-1.0"):
    member_configs(CFG, lrs=[1e-3, -1.0])
