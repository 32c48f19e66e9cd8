r"""Vocabulary threshold: is Godey et al.'s "about 1000 dimensions" a constant, or does the rank a
head needs grow with the vocabulary V?

For each V of the preset a sentencepiece tokenizer of V pieces is trained on the corpus
(``--data``; the token-file presets read ``--data=DIR`` of V<V>/train.uint16.bin,
val.uint16.bin and tokenizer.model) and a head-rank sweep (``sbjax.studies.head_rank``) trains
into ``OUT/runs/V<V>/``. Per V (``rstar``): r*(V) against the reference head at a tolerance of
TOL_CHAR nats per character, its margins, and r_0.6(V) of the centred dense head; with the
preset's ``ngram`` knobs the exact bigram r*(V) beside it (``bigram``). Across V: log-log fits
of r*, r_0.6 (and the bigram r*), the slopes the rank grid allows, and whether beta = 0 lies
outside two standard errors. Outputs in OUT: ``vocab_threshold.csv`` (one row per V),
``runs.csv`` (every run, with V), ``V<V>/head_rank.csv`` and ``V<V>/full_head.npy`` (each V's
sweep, as head_rank writes it), ``ngram.csv``, ``summary.json`` and ``fig_vocab_threshold``.

The bigram-n presets train nothing: the exact bigram r*(V, N) at each V and data fraction
(``bigram``; each V computed once, ``OUT/memo``): ``bigram_n_fits.csv`` (every fit of the
searches), ``bigram_n_checks.csv`` (the start check's refits), ``bigram_n_cells.csv`` (one row
per (V, fraction), with the margins of r* and lo to the tolerance and how far the second start
moved them), ``summary.json`` (per V the order of the reliable cells' intervals with N) and
``fig_bigram_n``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np

from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.experiment import Experiment, figure
from sbjax.overrides import config_from
from sbjax.paths import local_file, upath
from sbjax.studies import head_rank as hr
from sbjax.studies.corpus import corpus_overrides

from ..common import fmt, md_table, read_rows, write_json, write_rows
from . import bigram, rstar
from .presets import PRESETS, TOL_CHAR, W_LEVEL

TABLE, RUNS, NGRAM, SUMMARY = "vocab_threshold.csv", "runs.csv", "ngram.csv", "summary.json"
FITS, CHECKS, CELLS = "bigram_n_fits.csv", "bigram_n_checks.csv", "bigram_n_cells.csv"


def config(ctx, v: int):
  """The sweep's base Config at V = ``v`` (the head is set per run)."""
  p = ctx.preset
  if p.overrides.get("data.source") == "tokens":
    if not ctx.data:
      raise ValueError("--data: this preset trains on token files: pass --data=DIR of "
                       "V<V>/{train,val}.uint16.bin and tokenizer.model "
                       "(benchmarks/build_device_tokens.py writes them)")
    d = upath(ctx.data) / f"V{v}"
    where = {"data": {"source": "tokens", "options": {  # the whole section: the token files
        "path": str(d / "train.uint16.bin"), "val_path": str(d / "val.uint16.bin"), "vocab": v}}}
  else:
    where = {**corpus_overrides("text", ctx.data, ctx.out / "tfds"),
             "data.options.vocab_size": v}
  return config_from(p.base, {**p.overrides, **where,
                              "name": f"vocab_threshold-{ctx.preset_name}-V{v}"})


def dataset(ctx, cfg, v: int):
  """V's dataset, its tokenizer and token caches in OUT/V<V>/data."""
  tc = cfg.train
  return make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(ctx.out / f"V{v}" / "data"))


def plan(ctx):
  k = ctx.knobs
  for v in k.vocabs if k.plan is not None else ():
    cfg = config(ctx, v)
    yield from hr.sweep(ctx, cfg, k.plan, f"V{v}/", {"V": v}, dataset(ctx, cfg, v))


def _plain(x):  # JSON's types, as a memo reads them back
  return json.loads(json.dumps(x, default=lambda o: o.item()))


def _cpt(cfg, ds) -> float:
  """Characters per validation token (token files: the tokenizer.model beside them)."""
  path = ds.tokenizer_path or local_file(upath(cfg.data.options.path).with_name(
      "tokenizer.model"))
  return rstar.chars_per_token(Tokenizer(path).decode, ds.val_tokens)


def _v_rows(ctx, v: int) -> tuple:
  """(V's table row, its margins, its runs, its n-gram rows); writes OUT/V<V>/'s sweep files."""
  k, cfg, pre = ctx.knobs, config(ctx, v), f"V{v}/"
  ds = next(g.dataset for n, g in ctx.groups.items() if n.startswith(pre))
  rows = hr.table(ctx, cfg, k.plan, ds.vocab_size, pre)
  write_rows(ctx.out / pre / "head_rank.csv", rows)
  w, t = hr.full_head(ctx, ctx.out / pre / "full_head.npy", pre, k.plan.trunk)
  row, margins = rstar.thresholds(rows, w, _cpt(cfg, ds), TOL_CHAR, W_LEVEL)
  counts = np.bincount(np.asarray(ds.train_tokens).astype(np.int64), minlength=v)
  row.update(trunk=k.plan.trunk, trunk_step=t.step, head_population=int(k.plan.head_population),
             trunk_eval_loss=t.eval_loss if math.isfinite(t.eval_loss) else None,
             dtype=cfg.model.dtype, train_tokens=len(ds.train_tokens),
             types_under_50=int(np.sum(counts < 50)))
  ngram = []
  if k.ngram is not None:
    ngram, cols = ctx.memo(f"ngram-V{v}", [cfg.to_dict()["data"], k.ngram, row["tol_token"]],
                           lambda: _plain(bigram.ngram_columns(
                               ds.train_tokens, ds.val_tokens, v, k.ngram, row["tol_token"])))
    row.update(cols)
  return row, margins, [{"V": v, **r} for r in rows], ngram


def summarize(table: list, runs: list, ngram: list, margins: list) -> dict:
  """The fits across V, the slopes the rank grids allow, beta = 0 against two standard errors,
  the margins of each r* and the head lrs side by side."""
  v = [int(t["V"]) for t in table]
  s = {key: rstar.loglog_fit(v, [float(t[key]) for t in table]) for key in
       ("r_star", "r_werror06") + (("r_star_ngram",) if ngram else ())}
  grids = {"r_star": [str(t["ranks"]).split() for t in table]}
  if ngram:
    grids["r_star_ngram"] = [[r["rank"] for r in ngram if r["V"] == x] for x in v]
    s.update(n_censored_ngram=sum(int(t["ngram_censored"]) for t in table),
             ngram_above_d=[x for x, t in zip(v, table) if t["r_star_ngram"] > t["d_model"]])
  b = s["r_star"]
  return {**s, "n_censored": sum(int(t["censored"]) for t in table), "tol_char": TOL_CHAR,
          "w_level": W_LEVEL, "beta0_rejected_2se": bool(abs(b["beta"]) > 2 * b["beta_se"]),
          "beta_grid_range": {key: rstar.slope_range(v, g, [int(t[key]) for t in table])
                              for key, g in grids.items()},
          "margins": margins, "head_lrs": rstar.head_lrs(runs, table)}


def _bigram_n(ctx) -> None:
  k, out = ctx.knobs.bigram_n, {"fits": [], "checks": [], "cells": []}
  guess = k.guess
  for v, cap in zip(ctx.knobs.vocabs, k.max_iters, strict=True):
    cfg = config(ctx, v)
    ds = dataset(ctx, cfg, v)
    cpt = _cpt(cfg, ds)
    res = ctx.memo(f"bigram_n-V{v}", [cfg.to_dict()["data"], k, TOL_CHAR, cap, guess, cpt],
                   lambda a=(ds.train_tokens, ds.val_tokens, v, cpt, k, TOL_CHAR, cap, guess):
                   _plain(bigram.bigram_n_v(*a, lambda s: print(s, file=sys.stderr))))
    out = {key: out[key] + res[key] for key in out}
    guess = res["cells"][0]["r_star"]  # the next V starts where this V's smallest fraction ended
  for name, key in ((FITS, "fits"), (CHECKS, "checks"), (CELLS, "cells")):
    write_rows(ctx.out / name, out[key])
  write_json(ctx.out / SUMMARY, {
      "knobs": dataclasses.asdict(k), "vocabs": list(ctx.knobs.vocabs), "tol_char": TOL_CHAR,
      "order": {str(v): bigram.order([c for c in out["cells"] if c["V"] == v])
                for v in ctx.knobs.vocabs}})


def tables(ctx) -> None:
  if ctx.knobs.bigram_n is not None:
    return _bigram_n(ctx)
  per_v = [_v_rows(ctx, v) for v in ctx.knobs.vocabs]
  table, margins = [p[0] for p in per_v], [p[1] for p in per_v]
  runs, ngram = [r for p in per_v for r in p[2]], [r for p in per_v for r in p[3]]
  write_rows(ctx.out / TABLE, table)
  write_rows(ctx.out / RUNS, runs)
  if ngram:
    write_rows(ctx.out / NGRAM, ngram)
  write_json(ctx.out / SUMMARY, summarize(table, runs, ngram, margins))


def _draw_bigram_n(out, plt) -> None:
  cells, fits = read_rows(out / CELLS), read_rows(out / FITS, ("start",))
  fig, ax = plt.subplots(figsize=(6, 3.8))
  for i, v in enumerate(sorted({int(c["V"]) for c in cells})):
    for j, f in enumerate(sorted({float(c["fraction"]) for c in cells})):
      pts = sorted((int(r["rank"]), r["val_excess"]) for r in fits
                   if int(r["V"]) == v and r["fraction"] == f)
      ax.plot(*zip(*pts), "os^"[j % 3] + "-", color=f"C{i}", alpha=0.4 + 0.3 * j,
              label=f"V={v}, f={f:g}")
    ax.axhline(next(c["tol_token"] for c in cells if int(c["V"]) == v), color=f"C{i}", ls=":",
               lw=0.8, label=f"V={v}: tolerance")
  ax.set_xscale("log", base=2)
  ax.set(xlabel="rank r", ylabel="val(r) − val_full (nats/token)")
  ax.legend(fontsize=6)
  figure.save(fig, out, "fig_bigram_n", "Exact bigram r*(V, N)")


def draw(out) -> None:
  plt = figure.pyplot()
  if (out / CELLS).exists():
    return _draw_bigram_n(out, plt)
  table, s = read_rows(out / TABLE, ("protocol", "reference")), json.loads(
      (out / SUMMARY).read_text())
  runs = read_rows(out / RUNS, ("protocol", "head", "run"))
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for i, t in enumerate(table):
    best = hr.best_rows([r for r in runs if r["V"] == t["V"]], t["protocol"])
    axes[0].plot([r["rank"] for r in best], [r["eval_loss"] - t["ref_loss"] for r in best],
                 "o-", color=f"C{i}", label=f"V={int(t['V'])}")
    axes[0].axhline(t["tol_token"], color=f"C{i}", ls=":", lw=0.8)
  axes[0].set(xlabel="head rank r", ylabel="L(r) − L_ref (nats/token; dotted: tolerance)")
  vs = np.array([t["V"] for t in table], float)
  for key, marker, name in (("r_star", "o", "r* (trained)"), ("r_werror06", "s", "W-error 0.6"),
                            ("r_star_ngram", "^", "r* (exact bigram)")):
    if key in s:
      f = s[key]
      axes[1].plot(vs, [t[key] for t in table], marker, label=f"{name}: beta = "
                   f"{fmt(f['beta'], spec='.2f')} ± {fmt(f['beta_se'], spec='.2f')}")
      if math.isfinite(f["beta"]):
        axes[1].plot(vs, np.exp(f["log_c"]) * vs ** f["beta"], "--",
                     color=axes[1].lines[-1].get_color())
  axes[1].set_yscale("log", base=2)
  axes[1].set(xlabel="vocabulary size V", ylabel="rank")
  for ax in axes:
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
  figure.save(fig, out, "fig_vocab_threshold", "Rank needed vs vocabulary size")


def _report_bigram_n(out, rel: str, s: dict) -> list[str]:
  cells = read_rows(out / CELLS, ("evaluated", "start_check"))
  cols = ["V", "fraction", "train_tokens", "r_star", "lo", "censored", "tol_token",
          "margin_at_r_star", "margin_at_lo", "start_check", "start_moved", "reliable"]
  return [f"![bigram r* vs N]({rel}/{figure.name('fig_bigram_n')})", "", *md_table(cells, cols), "",
          "Order of the reliable cells' r* intervals with N, per V: "
          + ", ".join(f"V = {v}: {o}" for v, o in s["order"].items()) + "."]


def report(out, rel: str = ".") -> str:
  s = json.loads((out / SUMMARY).read_text())
  if (out / CELLS).exists():
    return "\n".join(_report_bigram_n(out, rel, s))
  table = read_rows(out / TABLE, ("protocol", "reference", "ranks", "trunk", "dtype"))
  cols = ["V", "d_model", "full_loss", "reference", "ref_loss", "chars_per_token", "tol_token",
          "r_star", "loss_at_r_star", "censored", "r_werror06"]
  lines = [f"![rank vs V]({rel}/{figure.name('fig_vocab_threshold')})", "",
           *md_table(table, cols + ["r_star_ngram"] * ("r_star_ngram" in table[0])), "",
           *md_table(s["margins"], list(s["margins"][0])), ""]
  for key, name in (("r_star", "r*"), ("r_werror06", "r_0.6"), ("r_star_ngram", "bigram r*")):
    if key in s:
      grid = s["beta_grid_range"].get(key)
      lines.append(f"- {name} ∝ V^beta: beta = {fmt(s[key]['beta'], spec='.3f')} ± "
                   f"{fmt(s[key]['beta_se'], spec='.3f')} (n = {s[key]['n']})"
                   + (f"; the rank grid allows [{fmt(grid[0], spec='.3f')}, "
                      f"{fmt(grid[1], spec='.3f')}]" if grid else "") + ".")
  lines.append(f"- r* censored at d: {s['n_censored']} of {len(table)}; beta = 0 outside two "
               f"standard errors: **{'yes' if s['beta0_rejected_2se'] else 'no'}**.")
  if s["head_lrs"]:
    lines += ["", *md_table(s["head_lrs"], list(dict.fromkeys(
        c for r in s["head_lrs"] for c in r)))]
  return "\n".join(lines)


EXPERIMENT = Experiment("vocab_threshold", PRESETS, plan, tables=tables, figures=draw,
                        report=report, doc=__doc__)
