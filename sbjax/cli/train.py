r"""Train (or resume) one sbjax run.

  python -m experiments.train --config=tiny --workdir=runs/tiny --config.train.steps=50

``--config`` is a config name (sbjax/configs.py), a JSON file or an ml_collections .py file;
``--config.section.key=value`` overrides any field, e.g. ``--config.model.head=lowrank
--config.model.head.rank=8`` (``sbjax.overrides``). Rerunning the command on a workdir
continues from its latest checkpoint, bit for bit, even after a kill mid-save; unreadable
checkpoints move to WORKDIR/checkpoints_bad/ with a warning. WORKDIR gets config.json,
metrics.jsonl, tb/, checkpoints/ and any trained tokenizer. One run per workdir
(WORKDIR/LOCK). SIGTERM saves the step in flight and exits with status 75; rerunning resumes.

``--population=N`` (or ``--population_lrs=a,b,..`` / ``--population_seeds=..``) trains N
members in one vmapped step into WORKDIR/member_<i> (sbjax/train/members.py). Multi-process:
``--coordinator_address=host:port --num_processes=N --process_id=i`` (on TPU VMs
jax.distributed is initialised from the environment).
"""

from __future__ import annotations

import json
import logging
import sys

import jax
from absl import flags

from . import common
from .data_note import data_note
from .number_flags import define_number_list
from sbjax import configs, overrides
from sbjax.config import Config
from sbjax import train as train_lib
from sbjax.train import members as members_lib
from sbjax.train.lock import workdir_lock

CONFIG = flags.DEFINE_string("config", "tiny", "a config name, a .json config, or an "
                             "ml_collections .py file; override fields with "
                             "--config.section.key=value")
CONFIG_OVERRIDES = flags.DEFINE_multi_string(
    "config_override", [], "a Config override KEY=VALUE (repeatable), usually spelled "
    "--config.KEY=VALUE, e.g. --config.train.steps=50 --config.model.d_model=64")
WORKDIR = flags.DEFINE_string("workdir", None, "run directory (created if missing)", required=True)
STOP_AFTER = flags.DEFINE_integer("stop_after", None, "stop at this step (the run can be resumed)",
                                  lower_bound=0)
POPULATION = flags.DEFINE_integer(
    "population", 0, "train N models differing in seed (train.seed + i) in one vmapped jit step; "
    "each member is a normal workdir WORKDIR/member_<i> (see sbjax/train/members.py)")
POP_LRS = define_number_list("population_lrs", None, "per-member peak learning rates "
                                    "(N values)", kind=float, example="1e-3,3e-3")
POP_SEEDS = define_number_list("population_seeds", None, "per-member init seeds (N values)",
                                      example="0,1,2")
common.define_distributed_flags()


def _population(cfg, n, seeds, lrs) -> list[dict]:
  """Train the members into WORKDIR/member_<i> (the data prepared once, in WORKDIR)."""
  cfgs = members_lib.member_configs(cfg, n, seeds, lrs)
  dirs = [members_lib.member_dir(WORKDIR.value, i) for i in range(len(cfgs))]
  with workdir_lock(WORKDIR.value, enabled=jax.process_index() == 0):  # its data, the list
    dataset = train_lib.make_dataset_for(cfg, WORKDIR.value)
    if jax.process_index() == 0:
      members_lib.write_population(WORKDIR.value, cfgs, dirs)
    return train_lib.train(cfgs, dirs, dataset=dataset, stop_after=STOP_AFTER.value)


def config_of(spec: str, items) -> Config:
  """``--config=spec`` with every ``--config.KEY=VALUE`` of ``items`` (``KEY=VALUE`` strings)
  applied, later ones winning; says on stderr what data the run trains on when the command
  line did not choose it."""
  pairs = dict(overrides.split_assignment(item) for item in items)
  try:
    base = configs.load(spec)
  except ValueError as e:
    raise ValueError(f"flag --config={spec}: {e}") from None
  cfg = overrides.apply(base, pairs, parse=True)
  note = data_note(spec, cfg, pairs)
  if note and jax.process_index() == 0:
    sys.stderr.write(note + "\n")
  return cfg


def main(argv):
  del argv
  common.maybe_initialize_distributed()  # before any JAX computation (imports are fine)
  cfg = config_of(CONFIG.value, CONFIG_OVERRIDES.value)  # checked before anything is written
  if POPULATION.value or POP_LRS.value or POP_SEEDS.value:
    summaries = _population(cfg, POPULATION.value or None, POP_SEEDS.value or None,
                            POP_LRS.value or None)
    for summary in summaries:
      common.result(json.dumps(summary))
    return
  summary = train_lib.train(cfg, WORKDIR.value, stop_after=STOP_AFTER.value)
  common.result(json.dumps(summary))


def cli():
  """The ``sbjax-train`` console script (and ``python -m experiments.train``)."""
  logging.basicConfig(level=logging.INFO, stream=sys.stderr)
  sys.argv = common.dotted_flags(sys.argv, "config", "config_override")
  common.run_script(main, __name__)


if __name__ == "__main__":
  cli()
