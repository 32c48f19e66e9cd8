"""Orbax checkpoints of a run: schedule, save, restore (sharded), recovery.

Layout of a workdir: ``config.json`` (the run's Config), ``checkpoints/<step>/`` (orbax items
params, opt and meta: the step, the data position, the data and RNG seeds; batches are a pure
function of (data_seed, index), so resume needs no replay), ``checkpoints_bad/`` (steps that
failed to restore, moved aside, never deleted).

Recovery at resume (``restore_latest_good``): orbax temporary directories of a killed save are
moved aside (``cleanup_tmp``); then, newest first, a step of another model is refused
(``CheckpointMismatchError``), and a step that is half-written, fails its checksums or fails to
restore is named and moved aside; the first good step is used.

Checksums: ``save`` writes ``checksums.json`` (``sbjax.checksums``) into each step orbax has
finished (the previous step after an asynchronous save, the last one in ``finish``). Steps
without one are used unverified, with a WARNING naming them.

The schedule is Pythia-like: 0, 1, 2, 4, …, 512, then every ``ckpt_every`` steps, plus the
final step; all are kept unless ``keep_every_n > 1`` (then the log-spaced steps, every n-th
regular step and the latest).
"""

from __future__ import annotations

from sbjax._extras import require

require("sbjax.checkpoint")

import heapq
import itertools
import json
import logging
import os
import time
from pathlib import Path

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp
from orbax.checkpoint.checkpoint_managers import save_decision_policy as sdp

from sbjax import checksums
from sbjax.atomic import atomic_write_text, is_local
from sbjax.config import Config, TrainConfig
from sbjax.model import Model
from sbjax.paths import upath

log = logging.getLogger("sbjax")


class Schedule:
  """The checkpoint steps of ``tc`` (module doc), never listed whole: a membership test, a
  count and a lazy ascending iteration, so that scheduling a long run costs nothing."""

  def __init__(self, tc: TrainConfig):
    self.end, self.every = tc.steps, tc.ckpt_every
    logs = [2**k for k in range(10) if 2**k <= tc.steps] if tc.ckpt_log_spaced else []
    self.extra = sorted(s for s in {0, tc.steps, *logs} if s == 0 or s % self.every)

  def __contains__(self, s) -> bool:
    return s in self.extra or (0 < s <= self.end and s % self.every == 0)

  def __iter__(self):
    return heapq.merge(self.extra, range(self.every, self.end + 1, self.every))

  def __len__(self) -> int:
    return len(self.extra) + self.end // self.every


checkpoint_steps = Schedule


def log_spaced_steps(tc: TrainConfig) -> list[int]:
  return [s for s in itertools.takewhile(lambda s: s <= 512, Schedule(tc))
          if s == 0 or s & (s - 1) == 0]


def ckpt_dir(workdir) -> Path:
  return upath(workdir) / "checkpoints"


def _preservation(tc: TrainConfig | None):
  if tc is None or tc.keep_every_n <= 1:
    return pp.PreserveAll()
  return pp.AnyPreservationPolicy([
      pp.CustomSteps(log_spaced_steps(tc) + [tc.steps]),
      pp.EveryNSteps(tc.ckpt_every * tc.keep_every_n),
      pp.LatestN(1),
  ])


def make_manager(workdir, tc: TrainConfig | None = None, *, read_only=False,
                 async_save: bool = False) -> ocp.CheckpointManager:
  steps = checkpoint_steps(tc) if tc is not None else None
  options = ocp.CheckpointManagerOptions(
      save_decision_policy=sdp.SpecificStepsPolicy(steps) if steps is not None else None,
      preservation_policy=_preservation(tc),
      enable_async_checkpointing=async_save,
      read_only=read_only,
      create=not read_only,
  )
  path = ckpt_dir(workdir)
  path = path.absolute() if is_local(path) else path  # absolute() of gs:// is a local path
  if read_only and not path.exists():
    raise FileNotFoundError(f"no checkpoints in {workdir}: {path} does not exist; "
                            "is this a training workdir?")
  return ocp.CheckpointManager(path, item_names=("params", "opt", "meta"), options=options)


COMMIT_FILE = "commit_success.txt"  # orbax writes it last, just before the final rename
MANIFEST_FILE = checksums.MANIFEST_FILE


def list_steps(workdir) -> list[int]:
  """Checkpointed steps of a workdir, ascending."""
  d = ckpt_dir(workdir)
  if not d.exists():
    return []
  return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())


def abstract_with_shardings(tree, shardings=None):
  """ShapeDtypeStructs of a tree, carrying the target shardings (default: one device)."""
  if shardings is None:
    shardings = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(jax.devices()[0]), tree)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def save(mngr: ocp.CheckpointManager, step: int, params, opt_state, meta: dict,
         force: bool = False) -> bool:
  """Save ``step``, then seal the steps orbax has finished (module doc)."""
  prev = mngr.latest_step()
  args = {"params": ocp.args.StandardSave(params), "meta": ocp.args.JsonSave(meta)}
  if opt_state is not None:
    args["opt"] = ocp.args.StandardSave(opt_state)
  saved = mngr.save(step, args=ocp.args.Composite(**args), force=force)
  for s in {prev, step} - {None}:
    _seal(mngr, s)
  return saved


def finish(mngr: ocp.CheckpointManager) -> None:
  """Wait for the manager's saves, seal the last one and close it."""
  mngr.wait_until_finished()
  if mngr.latest_step() is not None:
    _seal(mngr, mngr.latest_step())
  mngr.close()


def _seal(mngr, step: int) -> None:
  """Write the manifest of a finished ``step`` that has none (process 0)."""
  d = upath(mngr.directory) / str(step)
  if (jax.process_index() == 0 and (d / COMMIT_FILE).is_file()
      and not (d / MANIFEST_FILE).exists()):
    try:
      checksums.write_manifest(d)
    except FileNotFoundError:  # deleted by the preservation policy meanwhile
      pass


class CorruptCheckpointError(ValueError):
  """A step directory that cannot be restored (half-written, truncated, missing files)."""


def _aside(workdir, src, name: str) -> Path:
  """Move the folder ``src`` to WORKDIR/checkpoints_bad/NAME_<unix time>: a rename on local
  disk; on an object store a copy of each object, then a delete (never neither)."""
  dst = upath(workdir) / "checkpoints_bad" / f"{name}_{time.time_ns()}"
  dst.parent.mkdir(parents=True, exist_ok=True)
  if is_local(src):
    os.replace(src, dst)
    return dst
  for rel in checksums.relative_files(src):  # no directories to rename there
    (dst / rel).write_bytes((src / rel).read_bytes())
  src.rmtree()
  return dst


def move_aside(workdir, step: int, reason: str) -> Path:
  """Move a bad step directory aside (``_aside``) with a warning naming the step."""
  dst = _aside(workdir, ckpt_dir(workdir) / str(step), str(step))
  log.warning("checkpoint step %d in %s is bad (%s); moved it aside to %s", step, workdir,
              reason, dst)
  return dst


def verify_step(workdir, step: int, items=None) -> bool:
  """Check a step's files (those of ``items`` and the top-level ones) against its manifest:
  True when verified, False without one (a WARNING); else ``CorruptCheckpointError``."""
  try:
    verified = checksums.verify_manifest(ckpt_dir(workdir) / str(step), items)
  except checksums.ChecksumError as e:
    raise CorruptCheckpointError(f"failed its checksum check: {e}") from None
  if not verified:
    log.warning("checkpoint step %d in %s has no checksum manifest (%s): it is used "
                "unverified", step, workdir, MANIFEST_FILE)
  return verified


def unverified_steps(workdir, steps) -> list[int]:
  """The ``steps`` of ``workdir`` that have no checksum manifest (``verify_step``)."""
  return [s for s in steps if not (ckpt_dir(workdir) / str(s) / MANIFEST_FILE).exists()]


def restore(workdir, step: int, abstract_params, abstract_opt=None):
  """Restore (params, opt_state or None, meta) at ``step`` into the abstract targets' shardings."""
  mngr = make_manager(workdir, read_only=True)
  args = {"params": ocp.args.StandardRestore(abstract_params), "meta": ocp.args.JsonRestore()}
  if abstract_opt is not None:
    args["opt"] = ocp.args.StandardRestore(abstract_opt)
  out = mngr.restore(step, args=ocp.args.Composite(**args))
  mngr.close()
  return out["params"], (out["opt"] if abstract_opt is not None else None), out["meta"]


class ParamsReader:
  """Reads the params of many steps of one workdir with one read-only manager (a context
  manager): ``with ParamsReader(workdir, abstract) as r: plist = r.read([0, 1, 2])``."""

  def __init__(self, workdir, abstract_params):
    self.workdir, self.abstract = workdir, abstract_params
    self.mngr = make_manager(workdir, read_only=True)

  def read(self, steps) -> list:
    """The params of ``steps`` (in the abstract targets' shardings), each verified first."""
    out = []
    for step in steps:
      verify_step(self.workdir, step, ("params",))
      out.append(self.mngr.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore(self.abstract)))["params"])
    return out

  def close(self) -> None:
    self.mngr.close()

  def __enter__(self) -> "ParamsReader":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


class CheckpointMismatchError(ValueError):
  """A readable checkpoint whose arrays do not fit the configured model (another run's)."""


def saved_param_shapes(workdir, step: int) -> dict[str, tuple]:
  """{path: shape} of the params saved at ``step``, from orbax's metadata (no array reads)."""
  d = ckpt_dir(workdir) / str(step) / "params"
  m = ocp.PyTreeCheckpointHandler().metadata(d)
  tree = getattr(m, "tree", m)
  return {jax.tree_util.keystr(k): tuple(x.shape)
          for k, x in jax.tree_util.tree_leaves_with_path(tree)}


def check_params_match(workdir, step: int, abstract_params) -> None:
  """Refuse a checkpoint whose parameter names or shapes differ from ``abstract_params``,
  with a diff (unreadable metadata is left to the restore)."""
  try:
    saved = saved_param_shapes(workdir, step)
  except Exception:  # noqa: BLE001 - corrupt metadata: left to the restore
    return
  want = {jax.tree_util.keystr(k): tuple(x.shape)
          for k, x in jax.tree_util.tree_leaves_with_path(abstract_params)}
  diff = [f"{k}: saved {saved.get(k, 'absent')} -> model {want.get(k, 'absent')}"
          for k in sorted(set(saved) | set(want)) if saved.get(k) != want.get(k)]
  if diff:
    more = f"\n  ... and {len(diff) - 8} more" if len(diff) > 8 else ""
    raise CheckpointMismatchError(
        f"checkpoint step {step} in {workdir} was written by another model configuration "
        f"({len(diff)} parameter(s) differ); refusing to use it. Use the workdir the "
        "checkpoints came from, or its config.json. Differences:\n  "
        + "\n  ".join(diff[:8]) + more)


def restore_latest_good(workdir, abstract_params, abstract_opt=None, *, moved=None,
                        max_step: int | None = None):
  """Newest restorable step (at most ``max_step``), moving aside the steps that fail with a
  warning naming the step and the reason. Returns (step, params, opt, meta) or None;
  ``moved`` (a list), if given, receives the steps moved aside."""
  items = ("params", "meta") + (("opt",) if abstract_opt is not None else ())
  steps = [s for s in list_steps(workdir) if max_step is None or s <= max_step]
  for step in reversed(steps):
    check_params_match(workdir, step, abstract_params)  # another model's: refuse, keep in place
    d = ckpt_dir(workdir) / str(step)
    if abstract_opt is not None and (d / COMMIT_FILE).is_file() and not (d / "opt").exists():
      raise ValueError(f"{workdir} step {step} holds parameters only (an import, finished "
                       f"and intact); train from it with train.init_from instead")
    try:
      missing = [x for x in (COMMIT_FILE, *items) if not (d / x).exists()]
      if missing:
        raise CorruptCheckpointError(f"half-written step directory: {missing} missing")
      verify_step(workdir, step, items)
      return (step, *restore(workdir, step, abstract_params, abstract_opt))
    except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
      if jax.process_index() == 0:
        move_aside(workdir, step, f"{type(e).__name__}: {e}")
      if moved is not None:
        moved.append(step)
  return None


def restore_latest_common(workdirs, abstract_params, abstract_opt=None, *, moved=None):
  """``restore_latest_good`` over the workdirs of one run's members, at ONE step: the newest
  step that every workdir restores. A member's steps newer than it are moved aside too; with
  no common step every member starts over. Returns (step, [params], [opt], [meta]) or None;
  ``moved`` (one list per workdir) receives the moved steps."""
  moved = [[] for _ in workdirs] if moved is None else moved
  bound = None
  while True:  # restore every member at most at the newest step they all reached
    outs = [restore_latest_good(d, abstract_params, abstract_opt, moved=m, max_step=bound)
            for d, m in zip(workdirs, moved)]
    steps = [o[0] if o is not None else -1 for o in outs]
    bound = min(steps)
    if bound < 0 or len(set(steps)) == 1:
      break
  if len(workdirs) > 1:
    _move_ahead(workdirs, bound, moved)
  if any(o is None for o in outs):
    return None
  return outs[0][0], [o[1] for o in outs], [o[2] for o in outs], [o[3] for o in outs]


def _move_ahead(workdirs, step: int, moved) -> None:
  for d, m in zip(workdirs, moved):
    for s in list_steps(d):
      if s > step:
        if jax.process_index() == 0:
          move_aside(d, s, f"newer than step {step}, the newest step every member of the run "
                     "restores; the run continues from there")
        m.append(s)


def write_params(workdir, config: Config, params, step: int) -> None:
  """Write WORKDIR/config.json (if absent) and a params-only checkpoint at ``step``
  (used by imports from Hugging Face)."""
  workdir = upath(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  cfg_path = workdir / "config.json"
  if not cfg_path.exists():
    atomic_write_text(cfg_path, json.dumps(config.to_dict(), indent=2))
  mngr = make_manager(workdir)
  save(mngr, step, params, None, {"step": step, "data_position": step}, force=True)
  finish(mngr)


def read_config_dict(workdir) -> dict:
  """The JSON object of WORKDIR/config.json; an unparseable file is a ValueError naming it."""
  path = upath(workdir) / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{workdir} has no config.json; is it an sbjax workdir?")
  try:
    d = json.loads(path.read_bytes())
  except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    raise ValueError(f"{path} is not valid JSON ({e}); restore it from a copy, or use the "
                     "config the run was started with (--config)") from None
  if not isinstance(d, dict):
    raise ValueError(f"{path} holds a JSON {type(d).__name__}, not a config object; restore "
                     "it from a copy, or use the config the run was started with (--config)")
  return d


def load_config(workdir) -> Config:
  """The Config of WORKDIR/config.json (errors name the file)."""
  return Config.from_dict(read_config_dict(workdir))


def load_params(workdir, step: int | None = None, shardings=None):
  """(Config, params, step) restored onto one device (or ``shardings``), latest if step is
  None; the step's params are verified against its checksum manifest first."""
  cfg = load_config(workdir)
  steps = list_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoints under {ckpt_dir(workdir)}")
  if step is None:
    step = steps[-1]
  elif step not in steps:
    raise ValueError(f"step {step} is not checkpointed in {workdir}; available: {steps}")
  abstract = abstract_with_shardings(Model(cfg.model).abstract_params(), shardings)
  check_params_match(workdir, step, abstract)
  verify_step(workdir, step, ("params", "meta"))
  params, _, _ = restore(workdir, step, abstract)
  return cfg, params, step


def cleanup_tmp(workdir) -> list[str]:
  """Move orbax temporary directories left by a killed save aside; returns their names."""
  d = ckpt_dir(workdir)
  found = [p for p in sorted(d.iterdir()) if not p.name.isdigit() and "tmp" in p.name] \
      if d.exists() else []
  for p in found:
    _aside(workdir, p, p.name)
  return [p.name for p in found]
