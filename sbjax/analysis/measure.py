"""The one checkpoint measurement: ``fn`` over a run's checkpoints, each step computed once.

``measure_checkpoints(workdir, fn, key=...)`` reads the params of every step asked for (``chunk``
steps per call of ``fn``, for a measurement vmapped over checkpoints) and returns one row per
step. Rows are kept in the cache file (default ``WORKDIR/measure.json``) under ``key``
(everything the measurement depends on besides the checkpoint) and the step's ``identity``, so
a step is measured again only when the key or the step changed. A checkpoint of another model
is refused with a diff; a step whose params fail to read is set aside (``Damaged``) and the
others are measured.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from sbjax import checkpoint as ckpt
from sbjax import checksums
from sbjax.atomic import atomic_write_text, is_local
from sbjax.model import Model
from sbjax.paths import upath

CACHE = "measure.json"
log = logging.getLogger("sbjax")


class Measured(NamedTuple):
  rows: list  # one dict per measured step, in the order asked for, each with "step"
  set_aside: list  # {"step", "reason", "moved_to"} of the damaged steps


class Damaged:
  """Damaged steps, moved to ``WORKDIR/checkpoints_bad/`` as training moves them (never
  deleted; left in place with a warning when the workdir is read-only):
  ``{step: {"step", "reason", "moved_to"}}``."""

  def __init__(self, workdir):
    self.workdir, self.steps = workdir, {}

  def set_aside(self, step: int, err: BaseException) -> None:
    reason = f"{type(err).__name__}: {err}"
    try:
      moved_to = str(ckpt.move_aside(self.workdir, step, reason))
    except OSError as e:
      moved_to = None
      log.warning("checkpoint step %d in %s is bad (%s); could not move it aside (%s): "
                  "skipped", step, self.workdir, reason, e.strerror or e)
    self.steps[step] = {"step": step, "reason": reason, "moved_to": moved_to}

  def records(self) -> list[dict]:
    return [self.steps[s] for s in sorted(self.steps)]

  def none_left(self) -> Exception:
    """The error when every step asked for was damaged."""
    return ckpt.CorruptCheckpointError(
        f"no checkpoint of {self.workdir} could be analysed: step(s) {sorted(self.steps)} are "
        f"damaged (set aside to {Path(self.workdir) / 'checkpoints_bad'}; the first: "
        f"{self.records()[0]['reason'] if self.steps else '?'}); nothing was written. Restore "
        "good copies of the checkpoints, or analyse another run")


def read_good(reader, steps, damaged: Damaged) -> tuple[list, list]:
  """(params, steps) of the ``steps`` that read; the others are set aside."""
  plist, good = [], []
  for s in steps:
    try:
      plist.append(reader.read([s])[0])
      good.append(s)
    except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
      damaged.set_aside(s, e)
  return plist, good


def identity(workdir, step: int) -> str:
  """What a saved step is: its checksum manifest's digest, else its files' sizes and times."""
  d = ckpt.ckpt_dir(workdir) / str(step)
  manifest = checksums.read_manifest(d)
  if manifest is not None:
    blob = json.dumps(manifest["files"], sort_keys=True)
  else:
    stats = [(r, (d / r).stat().st_size, (d / r).stat().st_mtime_ns if is_local(d) else 0)
             for r in sorted(checksums.relative_files(d))]
    blob = json.dumps(stats)
  return hashlib.sha256(blob.encode()).hexdigest()


def _read_cache(path, key: str) -> dict:
  try:
    kept = json.loads(path.read_text())
  except (OSError, ValueError):
    return {"key": key, "steps": {}, "set_aside": []}
  if kept.get("key") != key:
    kept["steps"] = {}
  return {"key": key, "steps": kept.get("steps", {}), "set_aside": kept.get("set_aside", [])}


def measure_checkpoints(workdir, fn: Callable[[list, list], list], *, key: str,
                        steps: Sequence[int] | None = None, chunk: int = 1,
                        cache=None) -> Measured:
  """``fn(steps, params) -> rows`` over the checkpoints ``steps`` of ``workdir`` (None: all;
  -1: the last), measured in the order given, each step once (module doc); ``cache``: the
  cache file (default ``WORKDIR/measure.json``)."""
  wd = upath(workdir)
  saved = ckpt.list_steps(wd)
  want = saved if steps is None else [s for s in dict.fromkeys(
      saved[-1] if s == -1 else s for s in steps) if s in saved]
  path = wd / CACHE if cache is None else upath(cache)
  kept = _read_cache(path, key)
  ids = {s: identity(wd, s) for s in want}
  todo = [s for s in want if kept["steps"].get(str(s), {}).get("id") != ids[s]]
  damaged = Damaged(wd)
  if todo:
    abstract = ckpt.abstract_with_shardings(Model(ckpt.load_config(wd).model).abstract_params())
    for s in todo:  # a checkpoint of another model: refused, not set aside
      ckpt.check_params_match(wd, s, abstract)
    with ckpt.ParamsReader(wd, abstract) as reader:
      for i in range(0, len(todo), chunk):
        params, good = read_good(reader, todo[i:i + chunk], damaged)
        for s, row in zip(good, fn(good, params) if good else []):
          kept["steps"][str(s)] = {"id": ids[s], "row": {"step": s, **row}}
        kept["set_aside"] += damaged.records()
        damaged.steps.clear()
        atomic_write_text(path, json.dumps(kept, default=float))
  now = set(ckpt.list_steps(wd))  # a step set aside and saved again is measured again
  rows = [kept["steps"][str(s)]["row"] for s in want if s in now and str(s) in kept["steps"]]
  return Measured(rows, [r for r in kept["set_aside"] if r["step"] not in now])
