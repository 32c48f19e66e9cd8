"""The one checkpoint measurement: ``fn`` over a run's checkpoints, each step computed once.

``measure_checkpoints(workdir, fn, key=...)`` reads the params of every step asked for (``chunk``
steps per call of ``fn``, for a measurement vmapped over checkpoints) and returns one row per
step. Rows are kept in ``WORKDIR/measure.json`` under ``key`` (everything the measurement
depends on besides the checkpoint) and the step's identity (the SHA-256 of its checksum
manifest; its files' sizes and modification times when it has none), so a step is measured
again only when the key or the step changed. A step whose params fail to read (a file that
fails its checksum, a truncated array) is set aside as training sets one aside
(``sbjax.analysis.damaged``) and the other steps are measured; the set-aside steps are returned
and kept in the cache file.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable, NamedTuple, Sequence

from sbjax import checkpoint as ckpt
from sbjax import checksums
from sbjax.analysis.damaged import Damaged, read_good
from sbjax.atomic import atomic_write_text, is_local
from sbjax.model import Model
from sbjax.paths import upath

CACHE = "measure.json"


class Measured(NamedTuple):
  rows: list  # one dict per measured step, in step order, each with "step"
  set_aside: list  # {"step", "reason", "moved_to"} of the damaged steps


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
                        steps: Sequence[int] | None = None, chunk: int = 1) -> Measured:
  """``fn(steps, params) -> rows`` over the checkpoints ``steps`` of ``workdir`` (None: all;
  -1: the last), each step measured once (module doc)."""
  wd = upath(workdir)
  saved = ckpt.list_steps(wd)
  want = saved if steps is None else sorted({saved[-1] if s == -1 else s for s in steps} &
                                            set(saved))
  path = wd / CACHE
  cache = _read_cache(path, key)
  ids = {s: identity(wd, s) for s in want}
  todo = [s for s in want if cache["steps"].get(str(s), {}).get("id") != ids[s]]
  damaged = Damaged(wd)
  if todo:
    abstract = Model(ckpt.load_config(wd).model).abstract_params()
    with ckpt.ParamsReader(wd, abstract) as reader:
      for i in range(0, len(todo), chunk):
        params, good = read_good(reader, todo[i:i + chunk], damaged)
        for s, row in zip(good, fn(good, params) if good else []):
          cache["steps"][str(s)] = {"id": ids[s], "row": {"step": s, **row}}
        cache["set_aside"] += damaged.records()
        damaged.steps.clear()
        atomic_write_text(path, json.dumps(cache, default=float))
  now = set(ckpt.list_steps(wd))  # a step set aside and saved again is measured again
  rows = [cache["steps"][str(s)]["row"] for s in want if s in now and str(s) in cache["steps"]]
  return Measured(rows, [r for r in cache["set_aside"] if r["step"] not in now])
