"""The sources of ``experiments.convergence --series``: checkpoints measured on a fixed batch
of tokens instead of trained ones (issue 20).

Each ``--series`` entry is either
- an sbjax workdir: an imported series (``experiments.convert --from_hf``, with its
  ``import.json`` integrity record) or a training run. The analysis's checks apply
  (``sbjax.analysis.analyze.open_run``): the token ids must lie in the model's vocabulary and
  the rows fit its ``max_len``; revisions that duplicate another's weights are refused
  unless ``allow_duplicates`` (their CKA to the final would read as the twin's, 1.0 for an
  alias of the final);
- or a directory of Hugging Face revisions (``step<N>/`` with config.json and safetensors),
  read directly (no integrity record: the ids are checked against its vocabulary).

The fixed batch is the token file: an integer ``.npy`` [n, T+1] (Pythia batch-viewer rows).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from sbjax.analysis.analyze import open_run
from sbjax.analysis.settings import Settings
from sbjax.data import tokens as tokens_lib
from sbjax.studies import convergence as conv
from ..shared import upath


def is_workdir(path) -> bool:
  """An sbjax workdir (config.json at the top): an import or a run, not an HF revision dir."""
  p = upath(path)
  return (p / "config.json").is_file() and not (p / "model.safetensors").exists()


def _workdir_source(path, tokens: str, allow_duplicates: bool, out: Path):
  """(Source restricted to the analysable steps, {step: duplicate of}) of an sbjax workdir."""
  run = open_run(path, Settings(groups=("loss",), tokens=tokens, out_dir=str(out),
                                allow_duplicates=allow_duplicates, progress=False,
                                figures=False, use_cache=False))
  src = conv.workdir_source(path, upath(path).name)
  dups = {int(s): int(d) for s, d in (run.duplicates or {}).items()}
  return dataclasses.replace(src, steps=list(run.steps)), dups


def series_sources(series: list, tokens: str, allow_duplicates: bool = False,
                   out: Path | str = ".") -> tuple:
  """(sources, the fixed batch int32 [n, T+1], info) of ``--series`` entries measured on
  the token file ``tokens``; ``out``: the experiment's output directory."""
  if not tokens:
    raise ValueError("--series needs --tokens=FILE.npy (or --series_tokens): an int array "
                     "[n, T+1] of token windows in the series' vocabulary (the fixed batch)")
  if not Path(tokens).is_file():
    raise FileNotFoundError(f"--tokens={tokens} does not exist")
  batch = np.asarray(tokens_lib.read_tokens(tokens), np.int32)  # checked [n, T+1] ids
  if batch.ndim != 2:
    raise ValueError(f"--tokens={tokens}: the fixed batch must be rows [n, T+1], got a flat "
                     f"stream of {batch.size} tokens; save it as an .npy of shape [n, T+1]")
  sources, dups = [], {}
  for p in series:
    if is_workdir(p):
      s, d = _workdir_source(p, tokens, allow_duplicates, upath(out) / "measure" / Path(p).name)
      dups[s.name] = d
    else:
      s = conv.series_source(p)
      tokens_lib.check_ids(batch, s.model.vocab_size, f"--tokens={tokens}: ",
                           f"{s.name} model.vocab_size")
    sources.append(s)
  info = {"source": "series", "series": [Path(p).name for p in series],
          "tokens_file": Path(tokens).name, "duplicate_of": dups}
  return sources, batch, info
