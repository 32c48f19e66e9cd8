"""Training: one loop with hooks (``loop``, ``hooks``), composed once into a run of N members
(``run``: ``train(cfgs, workdirs)``, ``train_once``; N = 1 is the plain run) around the jitted
pure step (``step``, ``build``, ``population``). ``done`` is the "already trained?" rule,
``lock`` the one writer per workdir, ``preempt`` the SIGTERM save."""

from sbjax._extras import require

require("sbjax.train")

from sbjax.train.members import member_configs, member_dir
from sbjax.train.run import make_dataset_for, train, train_once
from sbjax.train.step import make_train_step
from sbjax.train.workdir import NonFiniteLossError, read_metrics, resolve_vocab

__all__ = ["train", "train_once", "make_dataset_for", "member_configs", "member_dir",
           "make_train_step", "NonFiniteLossError", "read_metrics", "resolve_vocab"]
