"""target_rank's run: every (V, n) of a preset (finished parts in OUT/parts are read back),
then target_rank.csv, target_rank_contexts.csv, the meta record and the figures."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from ..shared import DEFAULT_TEXT, REPO, RunsProgress, upath, write_json, write_rows
from . import report
from .measure import curves, data_config, part_key
from .presets import Preset, fields, get_preset
from sbjax.atomic import atomic_write_text
from sbjax.data import make_dataset

CONTEXT_FIELDS = ("V", "n", "min_count", "n_pairs", "n_contexts_seen", "n_contexts_kept",
                  "kept_pairs", "nnz", "vocab_size", "seconds_counts")


def _streams(p: Preset, vocab: int, out: Path, data: str | None):
  """(DataConfig, [train tokens, validation tokens], data record) of one vocabulary size."""
  dc = data_config(p, vocab, out, data)
  t1 = time.perf_counter()
  ds = make_dataset(dc, seq_len=16, global_batch_size=1, seed=0,
                    workdir=str(out / "data" / f"V{vocab}"), process_index=0, process_count=1)
  if ds.vocab_size != vocab:
    raise ValueError(f"the tokenizer for V={vocab} has {ds.vocab_size} pieces")
  streams = [np.asarray(ds.train_tokens), np.asarray(ds.val_tokens)]
  return dc, streams, {"tokens": int(sum(s.size for s in streams)),
                       "seconds_tokenizer": round(time.perf_counter() - t1, 1)}


def _part(path: Path, streams, vocab: int, n: int, p: Preset) -> tuple[dict, bool]:
  """The rows and context info of one (V, n), read back when ``path`` holds them."""
  if path.exists():
    return json.loads(path.read_text()), False
  rows, info = curves(streams, vocab, n, p)
  rec = {"rows": rows, "info": info}
  atomic_write_text(path, json.dumps(rec))
  return rec, True


def _ordered(rows: list[dict], columns) -> list[dict]:
  return [{c: r.get(c) for c in columns} for r in rows]


def run(out: Path, preset, *, data: str | None = None, verbose: bool = True) -> None:
  """Every (V, n) of the preset (finished ones in OUT/parts are skipped); see the package doc."""
  p = get_preset(preset)
  out = upath(out)  # OUT/parts is made by its first part's write (a refused call makes none)
  t0 = time.perf_counter()
  rows, infos, data_info = [], [], {}
  k = p.knobs
  progress = RunsProgress(len(k.vocab_sizes) * len(k.ns), "target_rank", disable=not verbose)
  try:
    for vocab in k.vocab_sizes:
      dc, streams, data_info[vocab] = _streams(p, vocab, out, data)
      for n in k.ns:
        progress.start(f"V={vocab} n={n}")
        where = getattr(dc.options, "path", "") or getattr(dc.options, "name", "")
        key = part_key(p, vocab, n, str(where))
        part = out / "parts" / f"V{vocab}_n{n}_{key}.json"
        rec, computed = _part(part, streams, vocab, n, p)
        progress.finish(trained=computed)
        rows += rec["rows"]
        infos.append(rec["info"])
  finally:
    progress.close()
  write_rows(out / report.CSV, _ordered(rows, report.FIELDS))
  write_rows(out / report.CONTEXTS_CSV,
             _ordered(infos, CONTEXT_FIELDS + tuple(f"seconds_{v}" for v in k.variants)))
  tfds = p.overrides.get("data.source") == "tfds"
  default = (p.overrides.get("data.options.name", "") if tfds
             else os.path.relpath(DEFAULT_TEXT, REPO))
  write_json(out / report.META, {
      "preset": preset if isinstance(preset, str) else "custom", "preset_fields": fields(p),
      "corpus": str(data or default), "data": data_info,
      "seconds": round(time.perf_counter() - t0, 1),
      "smoothed_matrices": "held as sparse + rank one (S + a 1^T), never densified; "
                           "||M||_F exact from the parts"})
  report.draw(out)
