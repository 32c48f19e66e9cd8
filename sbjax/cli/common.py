"""Shared plumbing of the commands: multi-host start-up, the one error boundary, the result."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback

import jax
from absl import app, flags
from absl import logging as absl_logging

from sbjax import hostmem, lognotes
from sbjax.errors import write_log

_COORD = None
_NPROC = None
_PID = None
_DIST = None


def define_distributed_flags():
  global _COORD, _NPROC, _PID, _DIST
  _DIST = flags.DEFINE_enum(
      "distributed", "auto", ["auto", "on", "off"],
      "jax.distributed.initialize: 'auto' = on a TPU VM slice or when a coordinator is given")
  _COORD = flags.DEFINE_string("coordinator_address", None, "host:port of process 0")
  _NPROC = flags.DEFINE_integer("num_processes", None, "number of processes")
  _PID = flags.DEFINE_integer("process_id", None, "this process's index")


def maybe_initialize_distributed():
  """Call jax.distributed.initialize before any other JAX call, from flags or the TPU env."""
  if _DIST is None or _DIST.value == "off":
    return
  if _COORD.value:
    if _NPROC.value is None or _PID.value is None:
      raise ValueError("--coordinator_address needs --num_processes and --process_id "
                       f"(got num_processes={_NPROC.value}, process_id={_PID.value})")
    if not 0 <= _PID.value < _NPROC.value:
      raise ValueError(f"--process_id={_PID.value} must be in [0, --num_processes={_NPROC.value})")
    # CPU processes (tests, local multi-process runs) need cross-process CPU collectives;
    # gloo is the default in recent JAX, set it explicitly where the option is still "none".
    if jax.config.values.get("jax_cpu_collectives_implementation") in (None, "none"):
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=_COORD.value, num_processes=_NPROC.value,
                               process_id=_PID.value)
  elif _DIST.value == "on" or os.environ.get("TPU_WORKER_HOSTNAMES", "").count(",") > 0:
    jax.distributed.initialize()  # TPU VM / SLURM / GKE: discovered from the environment


def dotted_flags(argv: list, prefix: str, flag: str) -> list:
  """``--PREFIX.KEY=VALUE`` (or ``--PREFIX.KEY VALUE``) as ``--FLAG=KEY=VALUE``: absl has no
  dotted flag names, so ``--config.train.steps=50`` reaches the repeatable flag
  ``--config_override`` (``--data.source=text``: ``--data_override``)."""
  head, out, i = f"--{prefix}.", [], 0
  while i < len(argv):
    a = argv[i]
    if a.startswith(head) and "=" not in a and i + 1 < len(argv):
      a, i = f"{a}={argv[i + 1]}", i + 1
    out.append(f"--{flag}={a[len(head):]}" if a.startswith(head) else a)
    i += 1
  return out


_OWN = ("sbjax.", "sbjax_experiments.", "experiments.")


def show_own_flags() -> None:
  """Make every flag that sbjax or an experiment defined a key flag of the program, so that
  ``--helpshort`` lists them all: the flags a program shares with others (``--config``, the
  data flags ``--tokens``, ``--data.*``, ..., the distributed flags) are defined in other
  modules, and absl's short help lists only the program file's own (absl's and orbax's flags
  stay in ``--helpfull``)."""
  program = sys.argv[0]
  for module, defined in flags.FLAGS.flags_by_module_dict().items():
    if module != program and module.startswith(_OWN):
      for flag in defined:
        flags.FLAGS.register_key_flag_for_module(program, flag)


# Exceptions that say something is wrong with the input or the machine, not with sbjax: bad
# settings, files and folders, resources (a disk, memory, a device), a missing extra; the
# command line's own (absl). Any other exception reaching the top is a bug in sbjax.
USER_ERRORS = (ValueError, OSError, ImportError, MemoryError, RuntimeError, app.UsageError,
               flags.Error)
TRACEBACK = flags.DEFINE_bool("traceback", False, "on an error, show its full traceback (else "
                              "it goes to a log file that the error line names)")


def describe(e: BaseException) -> str:
  """What went wrong, as the error line says it: the message (an OS error's file first)."""
  if isinstance(e, OSError) and e.filename is not None and e.strerror:
    return " -> ".join(map(str, filter(None, (e.filename, e.filename2)))) + f": {e.strerror}"
  return str(e) or type(e).__name__


def error_line(e: BaseException, log: str) -> tuple[int, str]:
  """(exit status, the ``error: ...`` line and any lines of detail) of an exception that
  reached the top: 2 for a user's mistake (``USER_ERRORS``), 1 for a bug in sbjax, which the
  line calls one."""
  first, _, rest = describe(e).partition("\n")
  user = isinstance(e, USER_ERRORS)
  line = (f"error: {first} [traceback: {log}]" if user else
          f"error: a bug in sbjax, not in your input: {type(e).__name__}: {first} [traceback: "
          f"{log}; please report it with that file]")
  return 2 if user else 1, line + (f"\n{rest}" if rest else "")


def guarded(main, argv):
  """``main(argv)`` inside the one error boundary of every command: an exception that reaches
  it is one ``error: ...`` line on stderr and its exit status (``error_line``); the traceback
  goes to a log file the line names (``write_log``), or to stderr with ``--traceback``."""
  try:
    return main(argv)
  except Exception as e:  # noqa: BLE001 - the boundary: SystemExit (exit 75, ...) passes
    shown = flags.FLAGS.is_parsed() and TRACEBACK.value
    if shown:
      traceback.print_exc()
    try:
      log = "shown above" if shown else write_log(e)
    except OSError as err:  # (a full temp folder)
      log = f"none written: {describe(err)}"
    status, line = error_line(e, log)
    sys.stderr.write(f"\n{line}\n")
    sys.exit(status)


def run(main):
  """app.run with the one error boundary (``guarded``) around ``main``, and one line (exit
  status 2) for a command line absl cannot parse."""

  def wrapped(argv):
    # orbax logs every save at INFO through absl
    absl_logging.set_verbosity(absl_logging.WARNING)
    lognotes.install()
    logging.getLogger("sbjax").setLevel(logging.INFO)  # resume / recovery notes stay visible
    return guarded(main, argv)

  def parse_flags(argv):
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:  # e.g. an unknown config name in --config, a missing --workdir
      sys.stderr.write(f"error: {e}; see --helpshort or --helpfull\n")
      sys.exit(2)

  show_own_flags()
  app.run(wrapped, flags_parser=parse_flags)


_RESULT = []  # the real stdout of a command run by run_script, while stdout goes to stderr


def result(text: str) -> None:
  """Write the command's result (one JSON object or line) on stdout: under ``run_script``
  the only thing written there, so ``| jq`` works; everything else (TFDS's "Downloading and
  preparing ...", progress, logs) goes to stderr."""
  out = _RESULT[-1] if _RESULT else sys.stdout
  out.write(text + "\n")
  out.flush()


@contextlib.contextmanager
def stdout_is_result():
  """Within: what is printed is the command's result (``sweep --dry_run``'s listing), on the
  real stdout, as ``result`` writes."""
  with contextlib.redirect_stdout(_RESULT[-1] if _RESULT else sys.stdout):
    yield


def run_script(main, module: str):
  """``run(main)`` for a console script (``sbjax-train`` -> ``cli()`` of ``module``) as for
  ``python -m``: ``run`` registers the flags of sbjax's modules, ``module``'s among them, for
  the program file ``sys.argv[0]``, whose flags absl's ``--helpshort`` lists. While ``main``
  runs, stdout is redirected to stderr; ``result`` writes to the real stdout. The host
  allocator is set here (``sbjax.hostmem``, before JAX starts its backend), not on import;
  ``run`` adds the log filter (``sbjax.lognotes``)."""
  del module
  hostmem.keep_freed_host_memory()

  def main_with_clean_stdout(argv):
    _RESULT.append(sys.stdout)
    try:
      with contextlib.redirect_stdout(sys.stderr):
        return main(argv)
    finally:
      _RESULT.pop()

  run(main_with_clean_stdout)
