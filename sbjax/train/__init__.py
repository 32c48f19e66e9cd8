"""Training: one loop with hooks, composed once into a run of N members (N = 1: the plain run).

Modules: ``step`` (``TrainState``, the jitted pure step, evaluation), ``loop`` (``run_loop``:
metrics read one step late, the one place that decides boundaries), ``hooks`` (metrics
log, TensorBoard mirror, progress, evaluation, checkpoint save, NaN policy, in-memory
snapshots), ``workdir`` (config.json checks, metrics.jsonl), ``members`` (what may vary
between the members of a run), ``population`` (the members' step, vmapped), ``build`` (the
jitted programs of a run), ``run`` (``train``, ``train_once``: the composition), ``done``
(the "already trained?" rule), ``lock`` (the workdir lock: one writer per workdir),
``preempt`` (SIGTERM: save at the next step boundary, exit status 75).
"""

from sbjax._extras import require

require("sbjax.train")

from sbjax.train.loop import Boundary, Hook, Schedule, run_loop
from sbjax.train.members import member_configs, member_dir
from sbjax.train.run import make_dataset_for, train, train_once
from sbjax.train.step import (TrainState, evaluate, make_eval_step, make_train_step,
                              state_step)
from sbjax.train.workdir import (RESUME_MUTABLE, ConfigMismatchError, NonFiniteLossError,
                                 check_workdir_config, config_diff, init_trunk_from,
                                 read_metrics, repair_jsonl, resolve_vocab, summary_from_metrics)

__all__ = ["train", "train_once", "make_dataset_for", "member_configs", "member_dir",
           "run_loop", "Schedule", "Boundary", "Hook", "TrainState", "evaluate",
           "make_eval_step", "make_train_step", "state_step", "RESUME_MUTABLE",
           "ConfigMismatchError", "NonFiniteLossError", "check_workdir_config", "config_diff",
           "init_trunk_from", "read_metrics", "repair_jsonl", "resolve_vocab",
           "summary_from_metrics"]
