"""The members of a run: N configs that differ only in what a vmapped step can vary.

Members may differ in ``VARYING`` (and the run's ``name``); any other difference is refused
(``check_members``): ``train.seed`` (the member's init key), ``train.data_seed`` (equal seeds
share one batch, different ones give every member its own), ``train.lr`` (member 0's update
scaled by lr_i / lr_0), ``train.weight_decay`` (a traced λ_i), and ``model.head``'s fields its
kind lists in ``member_varying`` (``padded_lowrank``'s ``rank``: the member's init only).
On disk ``W/member_<i>/`` (``member_dir``) is a normal workdir per member;
``W/population.json`` (``write_population``) lists them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import NamedTuple, Sequence

from sbjax import heads
from sbjax.atomic import atomic_write_text
from sbjax.config import Config
from sbjax.paths import upath
from sbjax.train.workdir import leaves

VARYING = ("seed", "data_seed", "lr", "weight_decay")


class Varies(NamedTuple):
  """Which varying fields differ between the members (each a separate jitted program)."""

  data: bool  # per-member batches
  lr: bool  # per-member update scale
  weight_decay: bool  # per-member λ
  heads: tuple = ()  # the members' head configs when they differ (member_varying), else ()


def member_dir(workdir, i: int) -> Path:
  return upath(workdir) / f"member_{i}"


def member_configs(cfg: Config, n: int | None = None, seeds=None, lrs=None) -> list[Config]:
  """The members' configs: seeds default to ``train.seed + i``, lrs to ``train.lr``."""
  sizes = {len(x) for x in (seeds, lrs) if x is not None} | ({n} if n else set())
  if len(sizes) != 1 or min(sizes) < 1:
    raise ValueError(f"population size is ambiguous: population={n}, seeds={seeds}, lrs={lrs}; "
                     "give N >= 1 and/or lists of length N")
  (n,) = sizes
  seeds = list(seeds) if seeds is not None else [cfg.train.seed + i for i in range(n)]
  lrs = list(lrs) if lrs is not None else [cfg.train.lr] * n
  return [cfg.replace(train=dataclasses.replace(cfg.train, seed=int(s), lr=float(lr)))
          for s, lr in zip(seeds, lrs)]  # (replace validates lr > 0)


def _shared(cfg: Config) -> dict:
  """{dotted key: value} of every field the members must share."""
  free = {"name", *(f"train.{k}" for k in VARYING),
          *(f"model.head.{k}" for k in getattr(heads.get(cfg.model.head), "member_varying", ()))}
  return {k: v for k, v in leaves(cfg.to_dict()).items() if k not in free}


def _hint(diff: list, cfgs: Sequence[Config]) -> str:
  """What to do about members that differ in ``diff``."""
  if diff == ["model.head.rank"] and all(c.model.head.kind == "lowrank" for c in cfgs):
    pad = max(c.model.head.rank for c in cfgs)
    return (f"lowrank heads of different ranks: use head padded_lowrank with pad={pad} (the "
            "largest rank) and each member's rank, or train them as separate runs")
  return "train them as separate runs"


def check_members(cfgs: Sequence[Config]) -> Varies:
  """Refuse members that differ outside ``VARYING``; say which varying fields differ."""
  first = _shared(cfgs[0]) if len(cfgs) > 1 else {}  # (one run: nothing to compare)
  for i, cfg in enumerate(cfgs[1:], 1):
    other = _shared(cfg)
    diff = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
    if diff:
      raise ValueError(f"member {i} differs from member 0 in {diff}; the members of one run "
                       f"may differ only in train.{{{','.join(VARYING)}}} (and a padded "
                       f"head's rank): {_hint(diff, [cfgs[0], cfg])}")
  hs = tuple(c.model.head for c in cfgs)
  return Varies(*(len({getattr(c.train, k) for c in cfgs}) > 1
                  for k in ("data_seed", "lr", "weight_decay")),
                heads=hs if len(set(hs)) > 1 else ())


def write_population(workdir, cfgs: Sequence[Config], dirs: Sequence[Path]) -> None:
  """``W/population.json``: the member directories and what varies between them."""
  members = [{"dir": upath(d).name, **{k: getattr(c.train, k) for k in VARYING}}
             for d, c in zip(dirs, cfgs)]
  atomic_write_text(upath(workdir) / "population.json", json.dumps({"members": members}, indent=2))
