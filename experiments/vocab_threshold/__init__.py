r"""Vocabulary threshold: is Godey et al.'s "about 1000 dimensions" a constant, or does the rank a
head needs grow with the vocabulary V?

For each V a sentencepiece tokenizer of V pieces is trained on the corpus (``--data``; the
token-file presets read ``--data=DIR`` of V<V>/{train,val}.uint16.bin and tokenizer.model) and
a head-rank sweep (``sbjax.studies.head_rank``) trains into ``OUT/runs/V<V>/``. Per V
(``rstar``): r*(V) at a tolerance of TOL_CHAR nats per character, its margins, r_0.6(V) of the
centred dense head, with ``ngram`` the exact bigram r*(V) (``bigram``); across V the log-log
fits and the slopes the rank grid allows; the pre-registered rule's cells and verdict
(``rule``). Outputs in OUT: ``vocab_threshold.csv`` (one row per V), ``runs.csv``,
``V<V>[-seed1]/head_rank.csv`` and ``full_head.npy`` (each sweep's), ``ngram.csv``,
``rstar_cells.csv``, ``summary.json`` and ``fig_vocab_threshold``.

The bigram-n presets train nothing: the exact bigram r*(V, N) at each V and data fraction
(``bigram``): ``bigram_n_fits.csv``, ``bigram_n_checks.csv`` (the start check's refits),
``bigram_n_cells.csv``, ``summary.json`` (per V the rule's verdict) and ``fig_bigram_n``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax.analysis.measure import identity
from sbjax.data import make_dataset
from sbjax.data.tokenizer import Tokenizer
from sbjax.experiment import Experiment, figure
from sbjax.overrides import config_from
from sbjax.paths import local_file, upath
from sbjax.studies import head_rank as hr
from sbjax.studies.corpus import corpus_overrides

from ..common import fmt, md_table, read_rows, write_json, write_rows
from . import bigram, rstar, rule
from .presets import PRESETS, TOL_CHAR, W_LEVEL

TABLE, RUNS, NGRAM, SUMMARY = "vocab_threshold.csv", "runs.csv", "ngram.csv", "summary.json"
FITS, CHECKS, CELLS = "bigram_n_fits.csv", "bigram_n_checks.csv", "bigram_n_cells.csv"
RULE_CELLS = "rstar_cells.csv"  # the rule's cells: one per (V, trunk seed)


def prefix(v: int, seed: int = 0) -> str:
  """The groups' name prefix (and OUT's folder) of V's sweep on trunk seed ``seed``."""
  return f"V{v}/" if not seed else f"V{v}-seed{seed}/"


def config(ctx, v: int, seed: int = 0):
  """The sweep's base Config at V = ``v`` (the head is set per run); ``seed`` > 0: the
  second trunk's (train.seed and train.data_seed)."""
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
  again = {"train.seed": seed, "train.data_seed": seed} if seed else {}
  return config_from(p.base, {**p.overrides, **where, **again, "name": f"vocab_threshold-"
                              f"{ctx.preset_name}-V{v}" + (f"-seed{seed}" if seed else "")})


def dataset(ctx, cfg, v: int):
  """V's dataset, its tokenizer and token caches in OUT/V<V>/data."""
  tc = cfg.train
  return make_dataset(cfg.data, seq_len=tc.seq_len, global_batch_size=tc.batch_size,
                      seed=tc.data_seed, workdir=str(ctx.out / f"V{v}" / "data"))


def plan(ctx):
  k = ctx.knobs
  for v, seed in sweeps(k):
    cfg = config(ctx, v, seed)
    yield from hr.sweep(ctx, cfg, k.plan, prefix(v, seed), {"V": v, "seed": seed},
                        dataset(ctx, cfg, v))


def sweeps(k) -> list[tuple]:
  """(V, trunk seed) of every sweep: seed 0 at each V, seed 1 too at ``reseed``'s V."""
  return [(v, s) for v in (k.vocabs if k.plan is not None else ())
          for s in (0, 1)[:1 + (v in k.reseed)]]


def _plain(x):  # JSON's types, as a memo reads them back
  return json.loads(json.dumps(x, default=lambda o: o.item()))


def _cpt(cfg, ds) -> float:
  """Characters per validation token (token files: the tokenizer.model beside them)."""
  path = ds.tokenizer_path or local_file(upath(cfg.data.options.path).with_name(
      "tokenizer.model"))
  return rstar.chars_per_token(Tokenizer(path).decode, ds.val_tokens)


def _v_rows(ctx, v: int, seed: int = 0) -> tuple:
  """(V's table row, its margins, its runs, its n-gram rows, its rule cell) of the sweep on
  trunk seed ``seed``; writes OUT/<prefix>'s sweep files."""
  k, cfg, pre = ctx.knobs, config(ctx, v, seed), prefix(v, seed)
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
  if k.ngram is not None and not seed:
    ngram, cols = ctx.memo(f"ngram-V{v}", [cfg.to_dict()["data"], k.ngram, row["tol_token"]],
                           lambda: _plain(bigram.ngram_columns(
                               ds.train_tokens, ds.val_tokens, v, k.ngram, row["tol_token"])))
    row.update(cols)
  cell = rstar.cell(rows, row, margins, _se_of(ctx, cfg, ds, pre, rows, row))
  cell = {"V": cell.pop("V"), "seed": seed, **cell}
  return row, margins, [{"V": v, "seed": seed, **r} for r in rows], ngram, cell


def _se_of(ctx, cfg, ds, pre: str, rows: list, row: dict):
  """run -> the block-bootstrap standard error (``rule.block_se``) of its per-window
  validation losses minus the reference run's (each run's losses kept in OUT/memo)."""
  n, rule_ = cfg.train.eval_batches, ctx.knobs.rule

  def losses(run: str):
    wd = ctx.out / "runs" / pre / run
    key = [pre + run, identity(wd, ckpt.list_steps(wd)[-1]), n, cfg.train.seq_len,
           cfg.train.batch_size]
    return np.asarray(ctx.memo("windows-" + (pre + run).replace("/", "-"), key,
                               lambda: rstar.window_losses(wd, ds, n)))

  ref = losses(rstar.run_of(rows, row, None))
  return lambda run: rule.block_se(losses(run) - ref, cfg.train.seq_len, rule_.block_tokens)


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
  guess, block = k.guess, ctx.knobs.rule.block_tokens
  for v, cap in zip(ctx.knobs.vocabs, k.max_iters, strict=True):
    cfg = config(ctx, v)
    ds = dataset(ctx, cfg, v)
    cpt = _cpt(cfg, ds)
    res = ctx.memo(f"bigram_n-V{v}", [cfg.to_dict()["data"], k, TOL_CHAR, cap, guess, cpt, block],
                   lambda a=(ds.train_tokens, ds.val_tokens, v, cpt, k, TOL_CHAR, cap, guess,
                             block): _plain(bigram.bigram_n_v(*a, lambda s: print(
                                 s, file=sys.stderr))))
    out = {key: out[key] + res[key] for key in out}
    guess = res["cells"][0]["r_star"]  # the next V starts where this V's smallest fraction ended
  cells, decision = bigram_decisions(ctx.knobs.rule, out["cells"])
  for name, rows in ((FITS, out["fits"]), (CHECKS, out["checks"]), (CELLS, cells)):
    write_rows(ctx.out / name, rows)
  write_json(ctx.out / SUMMARY, {
      "knobs": dataclasses.asdict(k), "vocabs": list(ctx.knobs.vocabs), "tol_char": TOL_CHAR,
      "rule": ctx.knobs.rule.text(), "moved": cells[0]["moved"], "decision": decision})


def bigram_decisions(rule_, cells: list) -> tuple[list, dict]:
  """(the cells with the rule's ``moved``, ``reliable`` and ``why``, {V: the verdict}): the
  start movement is the largest of the study's second starts."""
  moved = max((c["start_moved"] for c in cells if math.isfinite(c["start_moved"])),
              default=math.nan)
  alias = {"r_below": "lo", "margin_below": "margin_at_lo", "se_below": "se_at_lo"}
  marked, decision = [], {}
  for v in dict.fromkeys(c["V"] for c in cells):
    d = rule.decide([{**c, **{a: c[b] for a, b in alias.items()}, "moved": moved}
                     for c in cells if c["V"] == v], rule_)
    marked += [{x: y for x, y in c.items() if x not in alias} for c in d.pop("cells")]
    decision[str(int(v))] = d
  return marked, decision


def tables(ctx) -> None:
  if ctx.knobs.bigram_n is not None:
    return _bigram_n(ctx)
  per = {c: _v_rows(ctx, *c) for c in sweeps(ctx.knobs)}
  first = [per[(v, 0)] for v in ctx.knobs.vocabs]
  table, margins = [p[0] for p in first], [p[1] for p in first]
  runs, ngram = [r for p in per.values() for r in p[2]], [r for p in first for r in p[3]]
  write_rows(ctx.out / TABLE, table)
  write_rows(ctx.out / RUNS, runs)
  if ngram:
    write_rows(ctx.out / NGRAM, ngram)
  moved, where = rstar.start_movement([p[4] for p in per.values()])
  d = rule.decide([{**p[4], "moved": moved} for p in per.values()], ctx.knobs.rule)
  write_rows(ctx.out / RULE_CELLS, d.pop("cells"))
  write_json(ctx.out / SUMMARY, {
      **summarize(table, [r for r in runs if r["seed"] == 0], ngram, margins),
      "decision": {**d, "moved": moved, "moved_at": where, "rule": ctx.knobs.rule.text()}})


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
    best = hr.best_rows([r for r in runs if (r["V"], r.get("seed", 0)) == (t["V"], 0)],
                        t["protocol"])
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


def verdict_line(d: dict) -> str:
  """The rule's verdict on its claim and the cells it rests on, as ``rule.decide`` gave it."""
  how = f" ({d['direction']})" if d["direction"] else ""
  return f"\"{d['claim']}\": **{d['verdict']}**{how}; it rests on {d['rests_on']}."


def rule_lines(cells: list, d: dict, moved: str) -> list[str]:
  """The trained r*'s rule section: the rule, the margins deciding each cell's r* (from the
  rank below to r*) with their standard errors and the start movement, and the verdict."""
  cols = ["V", "seed", "r_below", "r_star", "censored", "tol_token", "excess_below",
          "margin_below", "se_below", "excess_at_r_star", "margin_at_r_star", "se_at_r_star",
          "moved", "reliable"]
  return [d["rule"], "", *md_table(cells, cols), "", f"- Start movement: {moved}.",
          f"- {verdict_line(d)}"]


def _report_bigram_n(out, rel: str, s: dict) -> list[str]:
  cells = read_rows(out / CELLS, ("evaluated", "start_check", "why"))
  cols = ["V", "fraction", "train_tokens", "r_star", "lo", "censored", "tol_token",
          "margin_at_r_star", "se_at_r_star", "margin_at_lo", "se_at_lo", "start_check",
          "start_moved", "moved", "reliable"]
  return [f"![bigram r* vs N]({rel}/{figure.name('fig_bigram_n')})", "", s["rule"], "",
          *md_table(cells, cols), "", f"- Start movement (the largest second start's): "
          f"{fmt(s['moved'], spec='.4f')}.",
          *(f"- V = {v}: {verdict_line(d)}" for v, d in s["decision"].items())]


def report(out, rel: str = ".") -> str:
  s = json.loads((out / SUMMARY).read_text())
  if (out / CELLS).exists():
    return "\n".join(_report_bigram_n(out, rel, s))
  table = read_rows(out / TABLE, ("protocol", "reference", "ranks", "trunk", "dtype"))
  cols = ["V", "d_model", "full_loss", "reference", "ref_loss", "chars_per_token", "tol_token",
          "r_star", "loss_at_r_star", "censored", "r_werror06"]
  d = s["decision"]
  lines = [f"![rank vs V]({rel}/{figure.name('fig_vocab_threshold')})", "",
           *md_table(table, cols + ["r_star_ngram"] * ("r_star_ngram" in table[0])), "",
           *rule_lines(read_rows(out / RULE_CELLS, ("why",)), d, f"{fmt(d['moved'], spec='.4f')}"
                       f" ({d['moved_at'] or 'no V has a second trunk seed'})"), ""]
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
