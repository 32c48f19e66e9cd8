"""Join per-step downstream evaluations (lm-evaluation-harness results JSON) onto the rows.

``analyze --join_evals=PATH``: PATH is one results file or a directory searched recursively
for ``*.json``. Each file in lm-eval's format, ``{"results": {TASK: {"acc,none": 0.61,
"acc_stderr,none": 0.01, "alias": ...}}, "config": {"model_args": "pretrained=...,
revision=step1000"}}``, gives the columns ``lmeval_<task>_<metric>`` (the filter suffix
``,none`` dropped, any other filter kept as ``_<filter>``; ``/`` and spaces become ``_``)
for one step. Its step comes from ``revision=`` in ``config.model_args`` (a revision name,
``sbjax.convert.revisions.parse_revision``), else from the file's name or the nearest
directory whose name holds a ``step<N>`` part (``step1000/results_2026-01-01.json``). Files of one step merge;
the same column with two different values is an error, as is a file with no step. Steps
without an evaluation get empty cells; evaluations of steps that were not analysed are
reported in the log and not joined.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

from sbjax.convert.revisions import parse_revision
from sbjax.paths import files_under, upath

log = logging.getLogger("sbjax")


def _column(task: str, metric: str) -> str:
  name, _, filt = metric.partition(",")
  col = f"lmeval_{task}_{name}" + (f"_{filt}" if filt and filt != "none" else "")
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", col)


def _step_of(path: Path, doc: dict) -> int | None:
  args = str((doc.get("config") or {}).get("model_args") or "")
  m = re.search(r"revision=([^,\s]+)", args)
  if m and parse_revision(m.group(1)) is not None:
    return parse_revision(m.group(1))["step"]
  for part in [path.stem] + [p.name for p in path.parents]:
    # only names that say "step": lm-eval's own file names carry dates (results_2026-...)
    m = re.search(r"(?:stage[-_]?\d+[-_])?step[-_]?\d+(?:[-_]tokens?[-_]?[\d.]+[KMBT]?)?", part,
                  re.IGNORECASE)
    if m and parse_revision(m.group(0)) is not None:
      return parse_revision(m.group(0))["step"]
  return None


def read_results(path) -> tuple[int, dict]:
  """(step, {column: value}) of one lm-eval results JSON (see the module doc)."""
  path = upath(path)
  try:
    doc = json.loads(path.read_text())
  except (OSError, ValueError) as e:
    raise ValueError(f"--join_evals: cannot read {path} as JSON ({e})") from None
  if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
    raise ValueError(f"--join_evals: {path} is not an lm-eval results file (no 'results')")
  step = _step_of(path, doc)
  if step is None:
    raise ValueError(f"--join_evals: no step for {path}: name the file or its directory like "
                     "a revision (step1000, step1000-tokens4B) or evaluate with "
                     "model_args revision=stepN")
  cols = {}
  for task, metrics in doc["results"].items():
    for metric, v in (metrics or {}).items():
      if isinstance(v, (int, float)) and not isinstance(v, bool):
        cols[_column(task, metric)] = float(v)
  return step, cols


def read_all(path) -> dict:
  """{step: {column: value}} of a results file or a directory of them."""
  p = upath(path)  # gs://...: read through etils.epath
  if not p.exists():
    raise FileNotFoundError(f"--join_evals={path} does not exist")
  files = [p] if p.is_file() else files_under(p, ".json")
  if not files:
    raise ValueError(f"--join_evals={path}: no .json results files found")
  out: dict = {}
  for f in files:
    step, cols = read_results(f)
    have = out.setdefault(step, {})
    for k, v in cols.items():
      if k in have and not (have[k] == v or (math.isnan(have[k]) and math.isnan(v))):
        raise ValueError(f"--join_evals: step {step} has two values of {k} "
                         f"({have[k]} and {v}, the second in {f})")
      have[k] = v
  return out


def join(rows: list[dict], path_or_evals) -> list[dict]:
  """Rows with the evaluation columns of their step added (new dicts); ``path_or_evals``: a
  path, or what ``read_all`` returned."""
  evals = path_or_evals if isinstance(path_or_evals, dict) else read_all(path_or_evals)
  steps = {int(r["step"]) for r in rows}
  extra = sorted(set(evals) - steps)
  if extra:
    log.warning("--join_evals: evaluations of steps %s that were not analysed are not joined",
                extra)
  return [dict(r, **evals.get(int(r["step"]), {})) for r in rows]
