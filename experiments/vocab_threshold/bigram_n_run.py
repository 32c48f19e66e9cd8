"""vocab_threshold's bigram-n presets (``cpu-bigram-n``, ``test-bigram-n``): the exact bigram
r*(V, N), no training (``bigram_n.py``). Per V the tokenizer and token streams of the trained
sweeps (the text source of the preset's corpus, cached in OUT/V<V>/data), then the fractions;
writes ``bigram_n_fits.csv`` (every fit), ``bigram_n_cells.csv`` (one row per (V, fraction)),
``bigram_n.json`` (the knobs and the verdict) and the figure."""

from __future__ import annotations

import dataclasses
import sys

from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.studies.corpus import corpus_overrides
from ..shared import config_from, text_corpus, upath, write_json, write_rows
from . import bigram_n, bigram_n_report as rep, tolerance
from .presets import TOL_CHAR, get_preset


def streams_of(preset, corpus: str, vocab: int, out):
  """(train tokens, validation tokens, characters per validation token) at V = ``vocab``."""
  p = get_preset(preset)
  where = {**corpus_overrides("text", corpus, str(out / "tfds")), "data.vocab_size": vocab}
  base = config_from(p.base, {**p.overrides, **where})
  tc = base.train
  ds = make_dataset(base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / f"V{vocab}" / "data"))
  cpt = tolerance.stream_chars_per_token(Tokenizer(ds.tokenizer_path).decode, ds.val_tokens)
  return ds.train_tokens, ds.val_tokens, cpt


def run_bigram_n(out, preset, *, data: str | None = None, verbose: bool = True) -> None:
  out = upath(out)
  knobs = get_preset(preset).knobs
  k = knobs.bigram_n
  if len(k.max_iters) != len(knobs.vocabs):
    raise ValueError(f"bigram-n preset: max_iters {k.max_iters} needs one cap per V "
                     f"{knobs.vocabs}")
  corpus = str(text_corpus(data))
  out.mkdir(parents=True, exist_ok=True)
  log = (lambda s: print(s, file=sys.stderr, flush=True)) if verbose else (lambda s: None)
  fits, cells, guess = [], [], k.guess
  for v, cap in zip(knobs.vocabs, k.max_iters):
    tr, va, cpt = streams_of(preset, corpus, v, out)

    def write(f_rows, c_rows, done=(fits, cells)):
      write_rows(out / rep.FITS_CSV, done[0] + f_rows)
      write_rows(out / rep.CELLS_CSV, done[1] + c_rows)

    f_rows, c_rows = bigram_n.run_v(tr, va, v, cpt, k, TOL_CHAR, cap, guess, log, write)
    fits, cells = fits + f_rows, cells + c_rows
    guess = c_rows[0]["r_star"]  # the next V starts where this V's smallest fraction ended
  write_json(out / rep.SUMMARY, {"knobs": dataclasses.asdict(k), "vocabs": list(knobs.vocabs),
                                 "tol_char": TOL_CHAR, "verdict": rep.verdict(cells)})
  rep.draw(out)
