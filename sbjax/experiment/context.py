"""What an experiment's functions see while it runs: the output folder, the preset, ``--data``,
the results of the groups trained so far, the datasets (built once per data config) and memos
(a computation that is not a training run, such as an exact loss floor, kept once in
``OUT/memo/<name>.json`` under a key of everything it depends on)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from sbjax.atomic import atomic_write_text
from sbjax.paths import upath
from sbjax.train.members import member_dir


def digest(obj) -> str:
  """A stable hash of a JSON-able object (dataclasses and paths as text)."""
  text = json.dumps(obj, sort_keys=True, default=_plain, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()[:24]


def _plain(o):
  if dataclasses.is_dataclass(o) and not isinstance(o, type):
    return dataclasses.asdict(o)
  return str(o)


@dataclasses.dataclass
class Context:
  out: Path
  preset_name: str
  preset: Any
  data: str | None = None
  results: dict = dataclasses.field(default_factory=dict)  # group name -> member rows
  groups: dict = dataclasses.field(default_factory=dict)  # group name -> Group, as trained
  measured: dict = dataclasses.field(default_factory=dict)  # group name -> checkpoint rows
  set_aside: dict = dataclasses.field(default_factory=dict)  # "group/member" -> damaged steps
  failed: dict = dataclasses.field(default_factory=dict)  # group name -> error (keep_going)
  _datasets: dict = dataclasses.field(default_factory=dict, repr=False)

  @property
  def knobs(self):
    return self.preset.knobs

  def workdirs(self, group) -> list[Path]:
    """``OUT/runs/<name>`` for one member, ``OUT/runs/<name>/member_<i>`` for several."""
    base = self.out / "runs" / group.name
    return [base] if len(group.configs) == 1 else [member_dir(base, i)
                                                   for i in range(len(group.configs))]

  def dataset(self, cfg, seed: int | None = None):
    """The dataset of ``cfg``'s data section (its token caches in ``OUT/data``), built once
    per (data, batch shape, data seed) in a call."""
    from sbjax.data import make_dataset  # deferred: data sources import their own packages

    tc = cfg.train
    seed = tc.data_seed if seed is None else seed
    key = digest([cfg.to_dict()["data"], tc.seq_len, tc.batch_size, seed])
    if key not in self._datasets:
      self._datasets[key] = make_dataset(cfg.data, seq_len=tc.seq_len,
                                         global_batch_size=tc.batch_size, seed=seed,
                                         workdir=str(self.out / "data"))
    return self._datasets[key]

  def memo(self, name: str, key, compute: Callable[[], Any]):
    """``compute()``, or its value kept in ``OUT/memo/<name>.json`` under the same ``key``."""
    path, k = upath(self.out) / "memo" / f"{name}.json", digest(key)
    if path.exists():
      kept = json.loads(path.read_text())
      if kept.get("key") == k:
        return kept["value"]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"key": k, "value": value}, default=float))
    return value
