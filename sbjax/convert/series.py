"""Checkpoint series: a directory of HF revisions as a sorted sequence of (step, params).

Pythia publishes ~150 revisions per model (``step0`` … ``step143000``). Saved locally
as one HF snapshot directory per revision::

    pythia-70m/step0/{config.json, model.safetensors}
    pythia-70m/step1000/...

they load lazily, in step order, with ``iter_series`` and stack for vmapped
analysis with ``stack_series``::

    cfg = series_config("pythia-70m")
    steps, stacked = stack_series(iter_series("pythia-70m"))
    logits_SxBxTxV = jax.vmap(Model(cfg).apply, in_axes=(0, None))(stacked, tokens_BxT)

A revision directory name must end in ``step<N>`` (``step1000``, ``revision-step1000``,
``pythia-70m_step1000``, ``step-1000``) or be a bare number. All revisions must share
one model config; ``series_config`` checks that before any weights are read.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Iterator

import jax
import numpy as np

from sbjax.config import ModelConfig
from sbjax.convert import hf_import, revisions

_STEP_RE = re.compile(r"^(?:.*?[^A-Za-z0-9])?step[-_]?(\d+)$|^(\d+)$", re.IGNORECASE)


def parse_step(name: str) -> int | None:
  """The training step encoded in a revision name (``step1000`` -> 1000), else None."""
  m = _STEP_RE.match(os.path.basename(os.path.normpath(name)))
  if not m:  # names with stage / token parts: step1000-tokens4B, stage1-step101000-tokens424B
    info = revisions.parse_revision(name)
    return None if info is None else info["step"]
  return int(m.group(1) if m.group(1) is not None else m.group(2))


def find_revisions(path: str) -> list[tuple[int, str]]:
  """Sorted (step, directory) of the HF revisions under ``path`` ([] if none)."""
  if not os.path.isdir(path):
    raise ValueError(f"{path}: not a directory")
  out = []
  for name in os.listdir(path):
    d = os.path.join(path, name)
    step = parse_step(name)
    if step is not None and os.path.isfile(os.path.join(d, "config.json")):
      out.append((step, d))
  out.sort()
  dup = sorted({s for s, _ in out if sum(1 for t, _ in out if t == s) > 1})
  if dup:
    names = [os.path.basename(d) for s, d in out if s in dup]
    raise ValueError(f"{path}: several revision directories give the same step {dup}: {names}")
  return out


def is_series(path: str) -> bool:
  """True for a directory of revisions (not itself a HF model directory)."""
  return (os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json"))
          and bool(find_revisions(path)))


def series_config(path: str, *, dtype: str = "float32",
                  steps: Iterable[int] | None = None) -> ModelConfig:
  """The one ModelConfig shared by the revisions; ValueError naming any that differ."""
  revs = _select(path, steps)
  cfgs = [(s, d, hf_import.model_config_from_hf(hf_import.read_hf_config(d), param_dtype=dtype,
                                                 where=f"{d}: "))
          for s, d in revs]
  s0, d0, c0 = cfgs[0]
  diffs = []
  for s, d, c in cfgs[1:]:
    if c != c0:
      fields = [f"{k}={getattr(c, k)!r} (vs {getattr(c0, k)!r})"
                for k in c.__dataclass_fields__ if getattr(c, k) != getattr(c0, k)]
      diffs.append(f"{os.path.basename(d)}: {', '.join(fields)}")
  if diffs:
    raise ValueError(f"{path}: revisions do not share one config (reference "
                     f"{os.path.basename(d0)}): " + "; ".join(diffs))
  return c0


def _select(path: str, steps) -> list[tuple[int, str]]:
  revs = find_revisions(path)
  if not revs:
    raise ValueError(f"{path}: no revision directories (named stepN, each with a "
                     "config.json) found")
  if steps is not None:
    want = set(int(s) for s in steps)
    have = {s for s, _ in revs}
    if want - have:
      raise ValueError(f"{path}: requested steps not present: {sorted(want - have)}; "
                       f"available: {sorted(have)}")
    revs = [(s, d) for s, d in revs if s in want]
  return revs


def iter_series(path: str, *, dtype: str = "float32", allow_pickle: bool = False,
                steps: Iterable[int] | None = None) -> Iterator[tuple[int, dict]]:
  """Yield (step, params) for each revision in step order (one revision in memory at a time).

  The configs of all (selected) revisions are checked to agree before the first yield.
  """
  steps = None if steps is None else list(steps)
  series_config(path, dtype=dtype, steps=steps)
  for step, d in _select(path, steps):
    _, params = hf_import.import_hf(d, dtype=dtype, allow_pickle=allow_pickle)
    yield step, params


def stack_series(items: Iterable[tuple[int, dict]]) -> tuple[np.ndarray, dict]:
  """(steps S, params with a leading S axis on every leaf) for ``jax.vmap``."""
  items = list(items)
  if not items:
    raise ValueError("stack_series: no revisions given")
  steps = np.asarray([s for s, _ in items], dtype=np.int64)
  stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                         *[p for _, p in items])
  return steps, stacked
