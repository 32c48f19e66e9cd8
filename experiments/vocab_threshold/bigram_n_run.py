"""vocab_threshold's bigram-n presets (``cpu-bigram-n``, ``test-bigram-n``): the exact bigram
r*(V, N), no training (``bigram_n.py``). Per V the tokenizer and token streams of the trained
sweeps (the text source of the preset's corpus, cached in OUT/V<V>/data), then the fractions;
writes ``bigram_n_fits.csv`` (every fit of the searches), ``bigram_n_checks.csv`` (the start
check's second fits, ``bigram_n_check.py``), ``bigram_n_cells.csv`` (one row per (V, fraction)),
``bigram_n.json`` (the knobs and the verdict) and the figure. Rerun into the same OUT with the
same knobs, the cells already in its CSVs are not searched again (an interrupted run resumes;
the start check runs on cells that lack it)."""

from __future__ import annotations

import dataclasses
import json
import sys

from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.studies.corpus import corpus_overrides
from ..shared import config_from, read_rows, text_corpus, upath, write_json, write_rows
from . import bigram_n, bigram_n_report as rep, tolerance
from .presets import TOL_CHAR, get_preset

CSVS = (rep.FITS_CSV, rep.CHECKS_CSV, rep.CELLS_CSV)


def streams_of(preset, corpus: str, vocab: int, out):
  """(train tokens, validation tokens, characters per validation token) at V = ``vocab``."""
  p = get_preset(preset)
  where = {**corpus_overrides("text", corpus, str(out / "tfds")), "data.options.vocab_size": vocab}
  base = config_from(p.base, {**p.overrides, **where})
  tc = base.train
  ds = make_dataset(base.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                    seed=tc.data_seed, workdir=str(out / f"V{vocab}" / "data"))
  cpt = tolerance.stream_chars_per_token(Tokenizer(ds.tokenizer_path).decode, ds.val_tokens)
  return ds.train_tokens, ds.val_tokens, cpt


def earlier(out, summary: dict, knobs) -> dict:
  """(V, fraction) -> (cell row, fit rows, check rows, reuse the checks?) of an earlier run of
  the same knobs in ``out`` (empty when there is none): its cells are not searched again, and
  are kept in the CSVs until this run reaches them. Check rows are reused when that run's check knob is this one's, the cell was checked and each second fit
  converged or ran to this run's check cap (an unconverged one with a smaller cap is redone)."""
  if not (out / rep.CELLS_CSV).exists():
    return {}
  old = json.loads((out / rep.SUMMARY).read_text()) if (out / rep.SUMMARY).exists() else {}
  new = json.loads(json.dumps(summary))

  def key(x):
    return ({k: v for k, v in x.get("knobs", {}).items() if k not in ("check", "check_cap")},
            x.get("vocabs"), x.get("tol_char"))

  if key(old) != key(new):
    raise ValueError(f"bigram-n: {out} holds the CSVs of a bigram-n run with other knobs (or "
                     f"without its {rep.SUMMARY}); use a fresh --out")
  same_check = old["knobs"].get("check", 0) == new["knobs"]["check"]
  checks = read_rows(out / rep.CHECKS_CSV) if (out / rep.CHECKS_CSV).exists() else []
  fits = read_rows(out / rep.FITS_CSV)
  done = {}
  for c in read_rows(out / rep.CELLS_CSV):
    at = (int(c["V"]), float(c["fraction"]))

    def mine(rows, at=at):
      return [r for r in rows if (int(r["V"]), float(r["fraction"])) == at]

    cap = bigram_n.check_cap(knobs, knobs.max_iters[summary["vocabs"].index(at[0])])
    ran = (same_check and c.get("start_check") not in (None, "off") and mine(checks)
           and all(int(r["converged"]) or int(r["n_iter"]) >= cap for r in mine(checks)))
    done[at] = (c, mine(fits), mine(checks), bool(ran))
  return done


def run_bigram_n(out, preset, *, data: str | None = None, verbose: bool = True) -> None:
  out = upath(out)
  knobs = get_preset(preset).knobs
  k = knobs.bigram_n
  if len(k.max_iters) != len(knobs.vocabs):
    raise ValueError(f"bigram-n preset: max_iters {k.max_iters} needs one cap per V "
                     f"{knobs.vocabs}")
  corpus = str(text_corpus(data))
  out.mkdir(parents=True, exist_ok=True)
  summary = {"knobs": dataclasses.asdict(k), "vocabs": list(knobs.vocabs), "tol_char": TOL_CHAR}
  done = earlier(out, summary, k)
  write_json(out / rep.SUMMARY, {**summary, "verdict": None})
  log = (lambda s: print(s, file=sys.stderr, flush=True)) if verbose else (lambda s: None)
  fits, checks, cells, guess = [], [], [], k.guess
  for v, cap in zip(knobs.vocabs, k.max_iters):
    tr, va, cpt = streams_of(preset, corpus, v, out)

    def write(f_rows, k_rows, c_rows, old=(fits, checks, cells)):
      seen = {(int(c["V"]), float(c["fraction"])) for c in old[2] + c_rows}
      rest = [d for at, d in done.items() if at not in seen]  # the earlier run's, not yet here
      kept = ([r for d in rest for r in d[1]], [r for d in rest for r in d[2]], [d[0] for d in rest])
      for name, before, rows, more in zip(CSVS, old, (f_rows, k_rows, c_rows), kept):
        if before + rows + more:
          write_rows(out / name, before + rows + more)

    f_rows, k_rows, c_rows = bigram_n.run_v(tr, va, v, cpt, k, TOL_CHAR, cap, guess, log,
                                            write, done)
    fits, checks, cells = fits + f_rows, checks + k_rows, cells + c_rows
    guess = c_rows[0]["r_star"]  # the next V starts where this V's smallest fraction ended
  write_json(out / rep.SUMMARY, {**summary, "verdict": rep.verdict(cells)})
  rep.draw(out)
