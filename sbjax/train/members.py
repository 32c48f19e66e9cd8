"""The members of a run: N configs that differ only in what a vmapped step can vary.

A run of N members (``sbjax.train.train(cfgs, workdirs)``) trains them in one jitted step
vmapped over a leading member axis; N = 1 is the plain run. Members may differ in
``VARYING`` = the init seed, the data-order seed, the peak learning rate and the weight
decay (and the run's ``name``); every other field is one program for all of them, so a
difference there is refused (``check_members``). How each varying field enters the step:

- ``train.seed``: the member's init key (``Model.init`` vmapped over the keys);
- ``train.data_seed``: equal seeds share one batch (broadcast to every member); different
  seeds give every member its own batch (a leading member axis, one dataset per member);
- ``train.lr``: the update of the optimizer built with member 0's lr is scaled by
  lr_i / lr_0 (``sbjax.optim.make_optimizer(lr_scale=...)``; exact for lr_i = lr_0);
- ``train.weight_decay``: the member's decoupled λ_i, a traced value of its optimizer;
- ``model.head``'s fields that its kind lists in ``member_varying`` (the ``padded_lowrank``
  head's ``rank``: every member has the same parameter shapes): the member's init only
  (each member is initialised by the model of its own head config, ``sbjax.train.build``);
  the step is member 0's program.

Layout of a population on disk: ``W/member_<i>/`` (``member_dir``) is a normal workdir per
member; ``W/population.json`` (``write_population``) lists them.
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
  sizes = {len(x) for x in (seeds, lrs) if x is not None}
  if n is not None and n > 0:
    sizes.add(n)
  if len(sizes) != 1:
    raise ValueError(f"population size is ambiguous: population={n}, "
                     f"seeds={list(seeds) if seeds is not None else None}, "
                     f"lrs={list(lrs) if lrs is not None else None}; give N and/or lists of "
                     "length N")
  (n,) = sizes
  if n < 1:
    raise ValueError(f"population size must be >= 1, got {n}")
  seeds = list(seeds) if seeds is not None else [cfg.train.seed + i for i in range(n)]
  lrs = list(lrs) if lrs is not None else [cfg.train.lr] * n
  out = []
  for s, lr in zip(seeds, lrs):
    tc = dataclasses.replace(cfg.train, seed=int(s), lr=float(lr))  # validates lr > 0
    out.append(cfg.replace(train=tc))
  return out


def _shared(cfg: Config) -> dict:
  """{dotted key: value} of every field the members must share."""
  flat = {}
  for sec, v in cfg.to_dict().items():
    if isinstance(v, dict):
      flat.update({f"{sec}.{k}": x for k, x in v.items()
                   if not (sec == "train" and k in VARYING)})
    elif sec != "name":
      flat[sec] = v
  head = cfg.model.head
  free = getattr(heads.get(head), "member_varying", ())
  flat["model.head"] = {k: x for k, x in head.to_dict().items() if k not in free}
  return flat


def _hint(diff: list, cfgs: Sequence[Config]) -> str:
  """What to do about members that differ in ``diff``."""
  if diff == ["model.head"] and all(c.model.head.kind == "lowrank" for c in cfgs):
    pad = max(c.model.head.rank for c in cfgs)
    return (f"lowrank heads of different ranks: use head padded_lowrank with pad={pad} (the "
            "largest rank) and each member's rank, or train them as separate runs")
  return "train them as separate runs"


def check_members(cfgs: Sequence[Config]) -> Varies:
  """Refuse members that differ outside ``VARYING``; say which varying fields differ."""
  if not cfgs:
    raise ValueError("a run needs at least one member config; got none")
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
