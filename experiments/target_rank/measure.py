"""target_rank's measurements: the data config of one vocabulary size and the W-error curves
of every variant of one (V, n) count matrix (``sbjax.studies.ngram``, ``lowrank_svd``)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

from ..shared import config_from
from sbjax.studies.corpus import corpus_overrides
from .presets import Preset, fields
from sbjax.config import DataConfig
from sbjax.data.dataset import local_data_dir
from sbjax.studies import lowrank_svd, ngram


def data_config(p: Preset, vocab: int, out: Path, data: str | None) -> DataConfig:
  """The DataConfig of one vocabulary size (validated)."""
  source = p.overrides.get("data.source")
  # the token caches, shared by the runs, in a local folder (a gs:// out: the local data cache)
  where = None if source == "tfds" else local_data_dir(out) / "data" / "tfds"
  return config_from(p.base, {**p.overrides, "data.options.vocab_size": vocab,
                              **corpus_overrides(source, data, where)}).data


def dims_for(p: Preset, kmax: int) -> list[int]:
  top = min(kmax, p.knobs.max_d)
  dims = [1 << i for i in range(0, 31) if (1 << i) <= top]
  return dims + ([top] if top not in dims else [])


def part_key(p: Preset, vocab: int, n: int, corpus: str) -> str:
  """The cache key of one finished (V, n) in OUT/parts (every field that changes its rows)."""
  f = {k: v for k, v in fields(p).items() if k not in ("d_ref", "vocab_sizes", "ns")}
  return hashlib.blake2b(json.dumps([f, vocab, n, corpus], sort_keys=True).encode(),
                         digest_size=6).hexdigest()


def curves(tokens, vocab: int, n: int, p: Preset) -> tuple[list[dict], dict]:
  """The CSV rows of one (V, n): every variant's W-error curve; and the context info."""
  k = p.knobs
  t0 = time.perf_counter()
  m = ngram.context_counts(tokens, n, k.min_count, vocab)
  info = {"V": vocab, **m.info(), "seconds_counts": round(time.perf_counter() - t0, 2)}
  rows = []
  if m.n_rows == 0:
    logging.warning("target_rank: V=%d n=%d: no context seen >= %d times", vocab, n, k.min_count)
    return rows, info
  dims = dims_for(p, min(m.n_rows, vocab))
  for var in k.variants:
    t1 = time.perf_counter()
    op = lowrank_svd.variant_matrix(m.counts, var, k.k)
    c = lowrank_svd.w_error_curve(op, dims, gram_max_dim=k.gram_max_dim,
                                  oversample=k.oversample, n_iter=k.n_iter)
    for d, w in zip(c.dims, c.w_error):
      rows.append({"variant": var, "n": n, "V": vocab, "d": int(d), "w_error": float(w),
                   "C": m.n_rows, "nnz": int(m.counts.nnz), "method": c.method,
                   "min_count": k.min_count, "k": k.k})
    info[f"seconds_{var}"] = round(time.perf_counter() - t1, 2)
  return rows, info
