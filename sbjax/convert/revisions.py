"""Where the revisions of a checkpoint series are on disk, and which ones to import (no network).

Two layouts: the Hugging Face cache that ``from_pretrained(name, revision=R, cache_dir=C)``
leaves (``C/models--org--name/refs/<revision>`` holds the commit of
``snapshots/<commit>/{config.json, model.safetensors -> ../../blobs/<sha256>}``; ``path`` is
that repository, or a cache holding exactly one), or a directory of revision directories.

Revision names: ``step1000``, ``step-1000``, ``1000``, ``pythia-70m_step1000``, and names with
stage / token parts such as ``step1000-tokens4B`` or ``stage1-step101000-tokens424B``
(``parse_revision``), ordered by (stage, step); refs without a step (``main``) are skipped.

Selection (``select``): ``None`` = all; else a list of steps, or a spec ``"0,1000,5000"``,
``"0:10000"`` (every revision with 0 <= step <= 10000), ``"0:143000:10000"`` (those with
step % 10000 == 0 from 0) and combinations ``"0,1000:5000"``. A requested step that is not in
the series is an error naming the available steps.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

_REV_RE = re.compile(
    r"^(?:.*?[^A-Za-z0-9])??(?:stage[-_]?(?P<stage>\d+)[-_])?step[-_]?(?P<step>\d+)"
    r"(?:[-_]tokens?[-_]?(?P<tokens>\d+(?:\.\d+)?)(?P<unit>[KMBT]?))?$|^(?P<bare>\d+)$",
    re.IGNORECASE)
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


@dataclasses.dataclass(frozen=True)
class Revision:
  step: int
  name: str  # the revision (ref or directory) name
  path: str  # the snapshot / revision directory
  stage: int = 0
  tokens: int | None = None  # tokens seen, from the name (4B -> 4e9)
  commit: str = ""  # the snapshot sha (HF cache)


def parse_revision(name: str) -> dict | None:
  """{"step", "stage", "tokens"} of a revision name, else None (``main``, ``v1``, ...)."""
  m = _REV_RE.match(os.path.basename(os.path.normpath(name)))
  if not m:
    return None
  if m.group("bare") is not None:
    return {"step": int(m.group("bare")), "stage": 0, "tokens": None}
  tokens = None
  if m.group("tokens") is not None:
    tokens = int(round(float(m.group("tokens")) * _UNITS[m.group("unit").upper()]))
  return {"step": int(m.group("step")), "stage": int(m.group("stage") or 0), "tokens": tokens}


def cache_repo(path: str | os.PathLike) -> Path | None:
  """The ``models--org--name`` directory of an HF cache path, or None if it is not one."""
  p = Path(path)
  if p.name.startswith("models--") and (p / "snapshots").is_dir():
    return p
  if p.is_dir():
    repos = sorted(c for c in p.iterdir() if c.name.startswith("models--")
                   and (c / "snapshots").is_dir())
    if len(repos) > 1:
      raise ValueError(f"{path} is an HF cache holding several models "
                       f"{[r.name for r in repos]}; pass one of them (DIR/models--org--name)")
    if repos:
      return repos[0]
  return None


def _cache_revisions(repo: Path) -> list[Revision]:
  refs = repo / "refs"
  if not refs.is_dir():
    raise ValueError(f"{repo} has no refs/ directory: the HF cache names revisions there "
                     "(refs/<revision> holds the snapshot's commit)")
  out = []
  for ref in sorted(r for r in refs.rglob("*") if r.is_file()):
    name = ref.relative_to(refs).as_posix()
    info = parse_revision(name)
    if info is None:
      continue
    commit = ref.read_text().strip()
    snap = repo / "snapshots" / commit
    out.append(Revision(info["step"], name, str(snap), info["stage"], info["tokens"], commit))
  return out


def _dir_revisions(path: Path) -> list[Revision]:
  out = []
  for child in sorted(path.iterdir()):
    info = parse_revision(child.name)
    if info is not None and (child / "config.json").is_file():
      out.append(Revision(info["step"], child.name, str(child), info["stage"], info["tokens"]))
  return out


def find(path: str | os.PathLike) -> list[Revision]:
  """Every revision of a series (HF cache or directory of revisions), ordered by (stage, step);
  ValueError if two revisions give the same step."""
  p = Path(path)
  if not p.is_dir():
    raise ValueError(f"{path}: not a directory")
  repo = cache_repo(p)
  revs = _cache_revisions(repo) if repo is not None else _dir_revisions(p)
  revs.sort(key=lambda r: (r.stage, r.step, r.name))
  steps = [r.step for r in revs]
  dup = sorted({s for s in steps if steps.count(s) > 1})
  if dup:
    names = [r.name for r in revs if r.step in dup]
    raise ValueError(f"{path}: several revisions give the same step {dup}: {names}")
  return revs


def parse_spec(spec) -> tuple[set, list]:
  """(explicit steps, [(lo, hi, every)] ranges) of a selection (see the module doc)."""
  items = [str(s) for s in spec] if not isinstance(spec, str) else spec.split(",")
  steps, ranges = set(), []
  for item in (i.strip() for i in items if i.strip()):
    parts = item.split(":")
    try:
      nums = [int(x) for x in parts]
    except ValueError:
      raise ValueError(f"bad step selection {item!r}: use N, LO:HI or LO:HI:EVERY") from None
    if len(nums) == 1:
      steps.add(nums[0])
    elif len(nums) in (2, 3) and nums[0] <= nums[1] and (len(nums) == 2 or nums[2] > 0):
      ranges.append((nums[0], nums[1], nums[2] if len(nums) == 3 else 1))
    else:
      raise ValueError(f"bad step selection {item!r}: use N, LO:HI or LO:HI:EVERY (LO <= HI)")
  return steps, ranges


def select(revs: list[Revision], spec=None, where: str = "") -> list[Revision]:
  """The revisions a selection asks for (module doc); all for ``spec=None``."""
  if spec is None or spec == "" or spec == []:
    return list(revs)
  steps, ranges = parse_spec(spec)
  have = [r.step for r in revs]
  missing = sorted(steps - set(have))
  if missing:
    raise ValueError(f"{where}requested revision step(s) {missing} not found; available steps: "
                     f"{have}")
  keep = [r for r in revs if r.step in steps or any(
      lo <= r.step <= hi and (r.step - lo) % k == 0 for lo, hi, k in ranges)]
  empty = [f"{lo}:{hi}:{k}" for lo, hi, k in ranges
           if not any(lo <= s <= hi and (s - lo) % k == 0 for s in have)]
  if empty:
    raise ValueError(f"{where}step range(s) {empty} select no revision; available steps: {have}")
  return keep


def check_present(rev: Revision, where: str = "") -> None:
  """ValueError when a revision's directory (an HF snapshot) or its config.json is missing."""
  d = Path(rev.path)
  if not d.is_dir():
    raise ValueError(f"{where}revision {rev.name!r} points to snapshot {rev.commit or d.name} "
                     f"but {d} does not exist: the cache does not hold this revision's files; "
                     f"download it (from_pretrained(..., revision={rev.name!r})) or leave it out")
  if not (d / "config.json").is_file():
    raise ValueError(f"{where}revision {rev.name!r} ({d}) has no config.json")
