r"""``target_rank``: the rank of the target (Godey et al. 2024, E6), nothing trained. Per
vocabulary size V, a sentencepiece tokenizer on the corpus (``--data``; both splits as two
streams); per context length n, the next-token counts of the contexts seen ≥ ``min_count``
times (``sbjax.studies.ngram``) and per variant W-error(d), d = 1, 2, 4, ... ≤ min(C, V,
max_d) (``lowrank_svd``); each (V, n) computed once (``ctx.memo``). Outputs: target_rank.csv,
target_rank_contexts.csv (per (V, n): pairs, contexts seen and kept, nnz), summary.json (per
variant, the points (V, n, d < min(C, V)) where it lies below raw) and
fig_target_rank_<variant> (the Fig. 7 analogue: a panel per V, a curve per n)."""

from __future__ import annotations

import functools
import json

import numpy as np

from sbjax import overrides
from sbjax.data import make_dataset
from sbjax.experiment import Experiment, figure
from sbjax.studies import ngram
from sbjax.studies.corpus import corpus_overrides

from ..common import fmt, md_table, read_rows, write_json, write_rows
from . import lowrank_svd
from .presets import PRESETS

CSV, CONTEXTS_CSV = "target_rank.csv", "target_rank_contexts.csv"


def data_config(p, vocab: int, data=None):
  """The DataConfig of one vocabulary size."""
  return overrides.config_from(p.base, {**p.overrides, "data.options.vocab_size": vocab,
                                        **corpus_overrides(p.overrides["data.source"], data)}).data


def streams(dc, vocab: int, out) -> list[np.ndarray]:
  """The train and validation token streams of one vocabulary size."""
  ds = make_dataset(dc, seq_len=16, global_batch_size=1, seed=0,
                    workdir=str(out / "data" / f"V{vocab}"), process_index=0, process_count=1)
  if ds.vocab_size != vocab:
    raise ValueError(f"the tokenizer for V={vocab} has {ds.vocab_size} pieces")
  return [np.asarray(ds.train_tokens), np.asarray(ds.val_tokens)]


def curves(tokens, vocab: int, n: int, k) -> dict:
  """{rows: each variant's W-error curve, info} of one (V, n) of the streams ``tokens()``."""
  m, rows = ngram.context_counts(tokens(), n, k.min_count, vocab), []
  top = min(m.n_rows, vocab, k.max_d)
  dims = sorted({1 << i for i in range(top.bit_length())} | {top})  # 1, 2, 4, ..., top
  for var in k.variants if m.n_rows else ():
    ds, werr, method = lowrank_svd.w_error_curve(
        lowrank_svd.variant_matrix(m.counts, var, k.k), dims, gram_max_dim=k.gram_max_dim,
        oversample=k.oversample, n_iter=k.n_iter)
    rows += [{"variant": var, "n": n, "V": vocab, "d": int(d), "w_error": float(w),
              "C": m.n_rows, "nnz": int(m.counts.nnz), "method": method,
              "min_count": k.min_count, "k": k.k} for d, w in zip(ds, werr)]
  return {"rows": rows, "info": {"V": vocab, **m.info()}}


def vs_raw(rows) -> dict:
  """Per variant, the points (V, n, d < min(C, V)) where its W-error lies below raw's: how
  many, of how many, and the mean difference."""
  raw, out = {(r["V"], r["n"], r["d"]): r["w_error"] for r in rows if r["variant"] == "raw"}, {}
  for var in dict.fromkeys(r["variant"] for r in rows if r["variant"] != "raw"):
    d = [r["w_error"] - raw[(r["V"], r["n"], r["d"])] for r in rows if r["variant"] == var
         and (r["V"], r["n"], r["d"]) in raw and r["d"] < min(r["C"], r["V"])]
    out[var] = {"points": len(d), "lower_than_raw": sum(x < 0 for x in d),
                "mean_diff": float(np.mean(d)) if d else float("nan")}
  return out


def tables(ctx) -> None:
  p, k, rows, infos = ctx.preset, ctx.knobs, [], []
  for vocab in k.vocab_sizes:
    dc = data_config(p, vocab, ctx.data)
    tokens = functools.cache(functools.partial(streams, dc, vocab, ctx.out))
    corpus = str(getattr(dc.options, "path", "") or getattr(dc.options, "name", ""))
    for n in k.ns:
      key = [{**vars(k), "d_ref": 0, "vocab_sizes": 0, "ns": 0}, p.overrides, corpus, vocab, n]
      rec = ctx.memo(f"V{vocab}_n{n}", key, functools.partial(curves, tokens, vocab, n, k))
      rows, infos = rows + rec["rows"], infos + [rec["info"]]
  write_rows(ctx.out / CSV, rows)
  write_rows(ctx.out / CONTEXTS_CSV, infos)
  write_json(ctx.out / "summary.json", {"d_ref": k.d_ref, "vs_raw": vs_raw(rows)})


def draw(out) -> None:
  plt, rows = figure.pyplot(), read_rows(out / CSV)
  for var in dict.fromkeys(r["variant"] for r in rows):
    sub = [r for r in rows if r["variant"] == var]
    vs = sorted({r["V"] for r in sub})
    fig, axes = plt.subplots(1, len(vs), figsize=(4.2 * len(vs), 3.6), squeeze=False,
                             sharey=True)
    for ax, v in zip(axes[0], vs):
      for n in sorted({r["n"] for r in sub if r["V"] == v}):
        cur = sorted((r for r in sub if (r["V"], r["n"]) == (v, n)), key=lambda r: r["d"])
        ax.plot([r["d"] for r in cur], [r["w_error"] for r in cur], "o-", ms=3,
                label=f"n={n:g} (C={cur[0]['C']:g})")
      ax.set(xscale="log", xlabel="d", title=f"V={v:g}")
      ax.legend(fontsize=7)
    axes[0][0].set_ylabel("W-error(d)")
    figure.save(fig, out, f"fig_target_rank_{var}", f"W-error of the {var} next-token matrix")


def report(out, rel: str = ".") -> str:
  rows, s = read_rows(out / CSV), json.loads((out / "summary.json").read_text())
  d, variants = s["d_ref"], list(dict.fromkeys(r["variant"] for r in rows))
  look = {(r["variant"], r["V"], r["n"], r["d"]): r["w_error"] for r in rows}
  table = [{"V": c["V"], "n": c["n"], "C kept": c["n_contexts_kept"],
            "C seen": c["n_contexts_seen"],
            **{v: look.get((v, c["V"], c["n"], d)) if d < min(c["n_contexts_kept"], c["V"])
               else None for v in variants}} for c in read_rows(out / CONTEXTS_CSV)]
  return "\n".join(
      [f"![W-error, {v}]({rel}/{figure.name(f'fig_target_rank_{v}')})\n" for v in variants]
      + [(f"W-error at d = {d} (– where d ≥ min(C, V)); contexts seen ≥ "
          f"{fmt(rows[0]['min_count'])} times, add-k k = {fmt(rows[0]['k'])}:"), "",
         *md_table(table, list(table[0])), ""]
      + [f"- {v} lies below raw at {c['lower_than_raw']} of {c['points']} points (V, n, "
         f"d < min(C, V)); mean difference {fmt(c['mean_diff'], spec='+.4f')}."
         for v, c in s["vs_raw"].items() if c["points"]])


EXPERIMENT = Experiment("target_rank", PRESETS, lambda ctx: iter(()), tables=tables,
                        figures=draw, report=report, doc=__doc__)
