r"""Run a sweep: a JSON grid over config keys (format: see sbjax/sweep.py).

  python -m experiments.sweep --grid=grids/head_rank.json --sweep_dir=runs/head_rank
  python -m experiments.sweep --grid=FILE --sweep_dir=DIR --dry_run     # list runs + state

Rerunning skips finished runs and resumes interrupted ones. Several hosts: either each takes
its own share of the runs on its local devices (``--num_hosts=N --host_index=i``, default
$SBJAX_NUM_HOSTS / $SBJAX_HOST_INDEX; ``--num_hosts=auto`` reads the TPU VM environment and
each worker must see only its own chips), or every run spans the pod (leave --num_hosts at 1
and start the same command on every host; jax.distributed is initialised as in
experiments.train, process 0 writes the index).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

from absl import flags

from . import common
from sbjax import sweep

GRID = flags.DEFINE_string("grid", None, "sweep grid JSON file", required=True)
SWEEP_DIR = flags.DEFINE_string("sweep_dir", None,
                                "directory of the sweep (default: sweeps/<grid file stem>)")
NUM_HOSTS = flags.DEFINE_string("num_hosts", os.environ.get("SBJAX_NUM_HOSTS", "1"),
                                "hosts running independent shares of the sweep, or 'auto'")
HOST_INDEX = flags.DEFINE_integer("host_index", int(os.environ.get("SBJAX_HOST_INDEX", "0")),
                                  "this host's index in [0, num_hosts)")
DRY_RUN = flags.DEFINE_bool("dry_run", False, "list the runs with their state and exit")
common.define_distributed_flags()


def _hosts() -> tuple[int, int]:
  value = NUM_HOSTS.value.strip().lower()
  if value == "auto":
    names = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if not names:
      raise ValueError("--num_hosts=auto needs the TPU VM environment (TPU_WORKER_HOSTNAMES); "
                       "give --num_hosts=N --host_index=i instead")
    return int(os.environ.get("TPU_WORKER_ID", "0")), len(names)
  try:
    n = int(value)
  except ValueError:
    raise ValueError(f"--num_hosts={NUM_HOSTS.value!r}: an integer >= 1 or 'auto'") from None
  return HOST_INDEX.value, n


def main(argv):
  del argv
  host, n_hosts = _hosts()
  if n_hosts == 1:
    common.maybe_initialize_distributed()  # each run over all processes' devices
  sweep_dir = SWEEP_DIR.value or str(Path("sweeps") / Path(GRID.value).stem)
  listing = common.stdout_is_result() if DRY_RUN.value else contextlib.nullcontext()
  with listing:  # --dry_run's listing of the runs is its result
    rows = sweep.run_sweep(GRID.value, sweep_dir, host_index=host, num_hosts=n_hosts,
                           dry_run=DRY_RUN.value, verbose=True)
  if rows:
    counts = {}
    for r in rows:
      counts[r["status"]] = counts.get(r["status"], 0) + 1
    common.result(f"sweep {sweep_dir}: "
                  + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if any(r["status"] == "failed" for r in rows):
      sys.exit(1)


def cli():
  """``python -m sbjax.cli.sweep`` (and ``python -m experiments.sweep``)."""
  logging.basicConfig(level=logging.INFO, stream=sys.stderr)
  common.run_script(main, __name__)


if __name__ == "__main__":
  cli()
