r"""Head rank (Godey et al. 2024, E5, Fig. 6): validation loss and top-1 accuracy against the
head rank r.

On a text corpus (``--data``; default the packaged sample, ``sbjax/data/sample_text``) the sweep
of ``sbjax.studies.head_rank``: dense heads over an LR grid (``full``, the reference), rank-r
heads on the best full run's frozen trunk (protocol a) and from scratch (protocol b) for r in
the preset's ranks (default {1, 2, 4, ..., d}), and mos heads matched to the largest lowrank
heads by parameter count; the best LR of each by validation loss. Outputs in OUT:
``head_rank.csv`` (every run), ``full_head.npy`` (the best full run's V x d head, for
werror_loss), ``summary.json`` (per protocol the best-LR losses, the longest run of ranks whose
loss does not increase, and the check: protocol b non-increasing over at least 6 ranks) and
``fig_head_rank``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from sbjax.experiment import Experiment, figure
from sbjax.overrides import config_from
from sbjax.studies import head_rank as hr
from sbjax.studies.corpus import corpus_overrides

from ..common import md_table, read_rows, write_json, write_rows
from .presets import PRESETS

CSV, FULL_HEAD, SUMMARY = "head_rank.csv", "full_head.npy", "summary.json"
CHECK_RANKS = 6  # the check: protocol b's loss non-increasing over at least this many ranks
TEXT = ("protocol", "head", "run")


def base(ctx):
  """The sweep's trunk, data and schedule on ``--data`` (the head is set per run)."""
  return config_from(ctx.preset.base, {**ctx.preset.overrides,
                                       **corpus_overrides("text", ctx.data)})


def plan(ctx):
  yield from hr.sweep(ctx, base(ctx), ctx.knobs)


def write_sweep(ctx) -> list[dict]:
  """``head_rank.csv`` and ``full_head.npy`` of the sweep trained into ``ctx.out``."""
  b = base(ctx)
  rows = hr.table(ctx, b, ctx.knobs, ctx.dataset(b).vocab_size)
  write_rows(ctx.out / CSV, rows)
  hr.full_head(ctx, ctx.out / FULL_HEAD, how=ctx.knobs.trunk)
  return rows


def longest_non_increasing(ranks, losses) -> list[int]:
  """The longest run of consecutive ranks (in rank order) whose losses do not increase."""
  best, cur = [], []
  for i, r in enumerate(ranks):
    cur = (cur if cur and losses[i] <= losses[i - 1] else []) + [int(r)]
    best = list(cur) if len(cur) > len(best) else best
  return best


def summarize(rows) -> dict:
  res: dict = {}
  for p in ("a", "b"):
    best = hr.best_rows(rows, p)
    if best:
      ranks, losses = [int(r["rank"]) for r in best], [float(r["eval_loss"]) for r in best]
      run = longest_non_increasing(ranks, losses)
      res[p] = {"ranks": ranks, "eval_loss": losses,
                "eval_acc": [float(r["eval_acc"]) for r in best],
                "non_increasing": bool(np.all(np.diff(losses) <= 0)),
                "longest_non_increasing": run, "n_non_increasing": len(run),
                "inversions": int(sum(y > x for x, y in itertools.pairwise(losses)))}
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])]
  if full:
    res["full"] = {k: full[0][k] for k in ("eval_loss", "eval_acc", "lr", "run")}
  if "b" in res:
    res[f"check_b_non_increasing_{CHECK_RANKS}_ranks"] = res["b"]["n_non_increasing"] >= CHECK_RANKS
  return res


def tables(ctx) -> None:
  write_json(ctx.out / SUMMARY, summarize(write_sweep(ctx)))


def draw(out) -> None:
  """Fig. 6 analogue: best-LR validation loss and top-1 accuracy against r, (a) and (b)."""
  rows, plt = read_rows(out / CSV, TEXT), figure.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  full = [r for r in rows if r["protocol"] == "full" and int(r["best"])]
  for ax, key, label in ((axes[0], "eval_loss", "validation loss (nats)"),
                         (axes[1], "eval_acc", "top-1 accuracy")):
    for p, marker, name in (("a", "o-", "(a) frozen trunk"), ("b", "s-", "(b) from scratch")):
      best, color = hr.best_rows(rows, p), f"C{'ab'.index(p)}"
      if best:
        ax.plot([r["rank"] for r in best], [r[key] for r in best], marker, color=color,
                label=name)
      for r in hr.best_rows(rows, p, head="mos"):
        ax.plot(r["matched_rank"], r[key], "*", ms=11, color=color, mec="k",
                label=f"{p}: mos m={int(r['n_mix'])} ({r['param_ratio']:.2f}x params of r="
                      f"{int(r['matched_rank'])})")
    if full:
      ax.axhline(full[0][key], color="k", ls="--", lw=1, label="dense head (full)")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="head rank r", ylabel=label)
  axes[0].legend(fontsize=7)
  figure.save(fig, out, "fig_head_rank", "Head rank (Godey Fig. 6 analogue), best LR per rank")


def report(out, rel: str = ".") -> str:
  rows, s = read_rows(out / CSV, TEXT), json.loads((out / SUMMARY).read_text())
  by = {p: {int(r["rank"]): r for r in hr.best_rows(rows, p)} for p in ("a", "b")}
  table = [{"r": k, **{f"({p}) {c}": by[p].get(k, {}).get(c) for p in "ab"
                       for c in ("eval_loss", "eval_acc", "lr")}}
           for k in sorted(set(by["a"]) | set(by["b"]))]
  lines = [f"![head rank]({rel}/{figure.name('fig_head_rank')})", ""]
  lines += [*md_table(table, list(table[0])), ""] if table else []
  mos = [{c: r[c] for c in ("protocol", "n_mix", "params", "matched_rank", "param_ratio",
                            "eval_loss")} | {"lowrank(r) eval_loss": by.get(r["protocol"], {})
                                             .get(int(r["matched_rank"]), {}).get("eval_loss")}
         for r in rows if r["head"] == "mos" and int(r["best"])]
  lines += [*md_table(mos, list(mos[0])), ""] if mos else []
  for p, x in ((p, s[p]) for p in "ab" if p in s):
    run = ", ".join(map(str, x["longest_non_increasing"]))
    lines.append(f"- ({p}): loss non-increasing over {x['n_non_increasing']} of "
                 f"{len(x['ranks'])} ranks (r = {run}), {x['inversions']} inversions.")
  if "b" in s:
    ok = s[f"check_b_non_increasing_{CHECK_RANKS}_ranks"]
    lines.append(f"- (b) non-increasing over at least {CHECK_RANKS} ranks: "
                 f"**{'passed' if ok else 'failed'}**.")
  return "\n".join(lines)


EXPERIMENT = Experiment("head_rank", PRESETS, plan, tables=tables, figures=draw, report=report,
                        doc=__doc__)
