"""sbjax.train.build's cache: runs that differ only in loop fields share one build, and a build
reads no loop field (else sharing it would give a run another run's program)."""

import dataclasses
import types

from sbjax import sharding as shd
from sbjax.config import TrainConfig
from sbjax.train import build
from tests._tiny import tiny_run_config


class _Spy:
  """A TrainConfig that records which fields are read."""

  def __init__(self, tc: TrainConfig):
    object.__setattr__(self, "_tc", tc)
    object.__setattr__(self, "read", set())

  def __getattr__(self, name):
    self.read.add(name)
    return getattr(self._tc, name)


def test_a_build_reads_no_loop_only_field():
  cfg = tiny_run_config(skip_nonfinite_steps=2, freeze_trunk=False)
  spy = _Spy(cfg.train)
  fake = types.SimpleNamespace(model=cfg.model, train=spy, mesh=cfg.mesh)
  mesh = shd.make_mesh(cfg.mesh)
  build.build.uncached(fake, mesh, -1)
  assert spy.read, "the spy saw no field: the build no longer reads cfg.train through it"
  assert not spy.read & build.LOOP_ONLY, sorted(spy.read & build.LOOP_ONLY)
  assert build.LOOP_ONLY <= {f.name for f in dataclasses.fields(TrainConfig)}


def test_runs_differing_in_loop_fields_share_a_build_and_others_do_not():
  cfg = tiny_run_config()
  mesh = shd.make_mesh(cfg.mesh)
  loop = cfg.replace(train=dataclasses.replace(
      cfg.train, seed=3, data_seed=4, log_every=2, eval_every=6, ckpt_every=6,
      ckpt_log_spaced=False, skip_nonfinite_steps=0))
  assert build.build(cfg, mesh, -1) is build.build(loop, mesh, -1)
  for kw in (dict(lr=2e-3), dict(steps=30), dict(skip_nonfinite_steps=1)):
    other = cfg.replace(train=dataclasses.replace(cfg.train, **kw))
    assert build.build(other, mesh, -1) is not build.build(cfg, mesh, -1), kw
  assert build.build(cfg, mesh, 5) is not build.build(cfg, mesh, -1)
