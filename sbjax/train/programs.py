"""One build of a run's jitted programs per process, shared by the runs that differ only in
what the loop reads.

``train()`` traces, lowers and compiles its step, eval and init programs; the persistent
compilation cache skips only the compile. Runs in one process (a sweep over seeds, a resume,
a notebook) that differ only in the fields of ``LOOP_ONLY`` (the data order, the parameter
seed, when to log, evaluate and save, where to initialise the trunk from) run the *same*
programs, so they share one build: ``cached(build)`` keys it on the model config, the other
train fields, the mesh and the build's extra arguments. Least recently used builds beyond
``MAX_BUILDS`` are dropped.
"""

from __future__ import annotations

import collections
import dataclasses

from sbjax.config import Config

# TrainConfig fields read only by the loop, its hooks or the start (never by a jitted
# program); tests/unit/test_train_programs.py checks that a build reads none of them.
LOOP_ONLY = frozenset({"seed", "data_seed", "eval_every", "eval_batches", "log_every",
                       "ckpt_every", "ckpt_log_spaced", "keep_every_n", "async_checkpoint",
                       "init_from", "init_step"})
MAX_BUILDS = 8


def program_key(cfg: Config) -> tuple:
  """What a run's programs depend on: the model config and every train field outside
  ``LOOP_ONLY`` (``skip_nonfinite_steps`` only as on/off: the count is the loop's), and the
  data config under ``train.objective=expected`` (its step holds the language's table)."""
  tc = cfg.train
  fields = tuple((f.name, getattr(tc, f.name)) for f in dataclasses.fields(tc)
                 if f.name not in LOOP_ONLY and f.name != "skip_nonfinite_steps")
  data = cfg.data if tc.objective == "expected" else None
  return cfg.model, fields, tc.skip_nonfinite_steps > 0, data


def cached(build):
  """``build(cfg, mesh, *extra)`` memoised on ``(program_key(cfg), mesh, extra)``."""
  cache: collections.OrderedDict = collections.OrderedDict()

  def get(cfg: Config, mesh, *extra):
    key = (program_key(cfg), mesh, extra)
    if key in cache:
      cache.move_to_end(key)
      return cache[key]
    fns = cache[key] = build(cfg, mesh, *extra)
    while len(cache) > MAX_BUILDS:
      cache.popitem(last=False)
    return fns

  get.uncached = build
  get.cache_clear = cache.clear
  return get
