"""Training with the on-device planted sampler (``data.options.sampler=device``,
sbjax.train.device_batches): the step draws its batch from (data seed, state.step): the batches
it trains on are the ones ``DevicePlanted.train_batch`` copies to the host (the same run fed
those on the host path gives the same parameters); members with their own data seeds draw their
own batches."""

import dataclasses

import jax
import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import configs
from sbjax.config import DataConfig
from sbjax.train import read_metrics, train
from sbjax.train.run import make_dataset_for

DATA = DataConfig("planted_mix", dict(vocab=32, rank=2, mix=2, train_tokens=0, val_tokens=2048,
                                      sampler="device"))


def cfg(**train_kw):
  c = configs.load("tiny")
  c = c.replace(data=DATA, model=dataclasses.replace(c.model, vocab_size=32))
  # checkpoints at 0, 3, 6 (not log-spaced: a loop-only field, same programs)
  tc = dict(steps=6, batch_size=4, seq_len=16, log_every=1, eval_every=3, ckpt_every=3,
            ckpt_log_spaced=False, eval_batches=1, warmup_steps=1)
  return c.replace(train=dataclasses.replace(c.train, **{**tc, **train_kw}))


def losses(workdir):
  return {r["step"]: r["loss"] for r in read_metrics(workdir) if "loss" in r}


def params(workdir, step):
  return [np.asarray(x) for x in jax.tree.leaves(ckpt.load_params(workdir, step)[1])]


class _HostSide:
  """The same dataset read on the host path (no ``device_tables``)."""

  def __init__(self, ds):
    self._ds = ds

  def __getattr__(self, name):
    if name == "device_tables":
      raise AttributeError(name)
    return getattr(self._ds, name)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  wd = tmp_path_factory.mktemp("full")
  train(cfg(), wd, quiet=True)
  return wd


def test_the_step_trains_on_the_batches_the_dataset_names(tmp_path, full):
  host = _HostSide(make_dataset_for(cfg(), None))
  train(cfg(), tmp_path, dataset=host, quiet=True)
  a, b = losses(full), losses(tmp_path)
  assert all(abs(a[s] - b[s]) <= 1e-6 * abs(a[s]) for s in a), (a, b)
  # one program against two (sampler, step): float32 reassociation, which Adam's normalised
  # update carries into the rows of rarely seen tokens (entries ~1e-7 there)
  for x, y in zip(params(full, 6), params(tmp_path, 6)):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
  # evaluation reads the host's fixed validation tokens: the same on both paths
  ev = [{r["step"]: r["eval_loss"] for r in read_metrics(d) if "eval_loss" in r}
        for d in (full, tmp_path)]
  assert sorted(ev[0]) == [0, 3, 6] and all(abs(ev[0][s] - ev[1][s]) < 1e-5 for s in ev[0])


def test_members_with_their_own_data_seeds_draw_their_own_batches(tmp_path, full):
  members = [cfg(data_seed=s) for s in (0, 1)]
  out = train(members, [tmp_path / "m0", tmp_path / "m1"], stop_after=2, quiet=True)
  assert [o["step"] for o in out] == [2, 2]
  alone = train(cfg(data_seed=1), tmp_path / "alone", stop_after=2, quiet=True)  # full's build
  assert alone["step"] == 2
  la, lm, l0 = (losses(tmp_path / d) for d in ("alone", "m1", "m0"))
  assert all(abs(la[s] - lm[s]) <= 1e-5 for s in la) and sorted(la) == [0, 1], (la, lm)
  assert all(abs(l0[s] - losses(full)[s]) <= 1e-5 for s in l0)  # member 0: data seed 0
  assert l0[0] != lm[0]  # different batches from the first step on
