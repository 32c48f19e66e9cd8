"""Saturation of small language models (Godey et al. 2024, E1/E3/E4): a width sweep on text.

Models of widths d at a fixed depth and vocabulary train on one corpus (``--data``, default the
sample corpus; one tokenizer for all widths) for the same number of steps, with log-spaced
checkpoints, each measured on one fixed validation sample (``text_measure.py``) and summarised per
width (``summary.py``: late-rise tests, the scaling law L = A / N^alpha + E and its gap CIs).
Outputs in OUT: ``saturation_runs.csv`` (one row per width), ``saturation_fit.csv``,
``saturation_train_loss.csv``, ``saturation_loo.csv`` (each smaller width's gap with each fitted
width left out), ``saturation_meta.json``, ``summary.json`` (per width: the rise verdict, the
naive test, where each gap CI lies against 0; the scaling verdict with its leave-one-out rule)
and the figures ``FIGS``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import overrides
from sbjax.analysis import figures
from sbjax.config import Config, DataConfig
from sbjax.data.dataset import local_data_dir
from sbjax.experiment import Experiment, Group
from sbjax.experiment import figure
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.stats import ci_sign
from sbjax.train import read_metrics

from . import text_measure
from ..common import md_table, read_rows, write_json, write_rows
from .planted_measure import window_losses
from .presets import PRESETS
from .summary import (GAP_FITS, ScalingFit, fit_rows, gap_cis, loo_rows, scaling_verdict, smooth,
                      width_row)

FIGS = ("fig_loss_anisotropy", "fig_spectrum_heatmap", "fig_kl_uniform", "fig_scaling")
SIDES = {1.0: "above 0", -1.0: "below 0", 0.0: "covers 0"}  # where a CI lies against 0


def data_config(p, out, data) -> DataConfig:
  """The corpus of the preset: a text directory (``data`` or the sample corpus) with the
  preset's vocabulary, or a TFDS name (``data`` overrides the preset's)."""
  o = p.overrides
  keep = {k: o[k] for k in ("data.options.vocab_size", "data.options.name",
                            "data.options.max_docs") if k in o}
  where = None if o["data.source"] == "tfds" else local_data_dir(out) / "data" / "tfds"
  return overrides.apply(Config(), {**keep, **corpus_overrides(o["data.source"], data,
                                                                where)}).data


def width_config(p, w: int, dc: DataConfig) -> Config:
  return overrides.config_from(p.base, {
      **p.overrides, "data": dataclasses.asdict(dc), "model.d_model": int(w),
      "model.n_heads": max(1, int(w) // p.knobs.head_dim), "name": f"saturation-d{w}"})


def plan(ctx):
  p = ctx.preset
  dc = data_config(p, ctx.out, ctx.data)
  ds = ctx.dataset(width_config(p, p.knobs.widths[0], dc))
  if ds.tokenizer_path:  # the runs' configs name the shared tokenizer
    dc = dc.replace_options(tokenizer=str(ds.tokenizer_path))
  for w in p.knobs.widths:
    yield Group(f"d{w}", [width_config(p, w, dc)], labels=[{"width": int(w)}], dataset=ds)


def measure(ctx, group, j, steps, params):
  return text_measure.measure(ckpt.load_config(ctx.workdirs(group)[j]), group.dataset,
                             ctx.knobs, steps, params)


def tables(ctx) -> None:
  k, out = ctx.knobs, ctx.out
  rows, finals, train = [], [], []
  for name, g in ctx.groups.items():
    wd, ck = ctx.workdirs(g)[0], ctx.measured[name]
    recs = [{"step": int(r["step"]), "loss": float(r["loss"])} for r in read_metrics(wd)
            if "loss" in r]
    rows.append(width_row(ckpt.load_config(wd), ck, recs, k))
    finals.append(window_losses(ck)[-1])
    train += [{"width": rows[-1]["width"], **x} for x in recs]
  rows, fits = fit_rows(rows, k.fit_min_width)
  gap_cis(rows, finals, k.n_boot)
  write_rows(out / "saturation_loo.csv", loo_rows(rows))
  write_rows(out / "saturation_runs.csv", rows)
  write_rows(out / "saturation_fit.csv", fits)
  write_rows(out / "saturation_train_loss.csv", train)
  g, p = next(iter(ctx.groups.values())), ctx.preset
  ds, tc, dc = g.dataset, g.configs[0].train, g.configs[0].data
  write_json(out / "saturation_meta.json", {
      "preset": ctx.preset_name, "base": p.base, "overrides": p.overrides,
      "knobs": dataclasses.asdict(k), "data": {
          "source": dc.source,
          "path": getattr(dc.options, "path", "") or getattr(dc.options, "name", ""),
          "vocab_size": ds.vocab_size,
          "train_tokens": int(len(ds.train_tokens)), "val_tokens": int(len(ds.val_tokens)),
          "epochs": tc.steps * tc.batch_size * tc.seq_len / max(1, len(ds.train_tokens))}})
  write_json(out / "summary.json", {"widths": [summarize(r) for r in rows],
                                    "scaling": scaling_verdict(rows)})


def summarize(r: dict) -> dict:
  """The mechanical decisions of one width: the rise verdict (its CI against the threshold),
  the naive test, and where each final-gap CI lies against 0."""
  return {"width": int(r["width"]), "rise_verdict": r["rise_verdict"],
          "late_rise": bool(r["late_rise"]), "in_fit": bool(r["in_fit"]),
          **{f"gap_{f}_ci": SIDES.get(ci_sign(r[f"gap_{f}_ci_lo"], r[f"gap_{f}_ci_hi"]), "n/a")
             for f in ("final", "final_with_head")}}


def draw(out) -> None:
  """Every width together: Godey Fig. 3 (loss coloured by anisotropy), Fig. 4 (the head's
  σ_i/σ_1), Fig. 5 (KL(σ‖u)) and the scaling fit beside the training loss."""
  rows = read_rows(out / "saturation_runs.csv")
  points = read_rows(out / "checkpoints.csv")
  labels = [f"d={int(r['width'])}" for r in rows]
  ck = [[p for p in points if p["group"] == f"d{int(r['width'])}"] for r in rows]
  path = {s: out / figure.name(s) for s in FIGS}
  figures.plot_loss_anisotropy(ck, path["fig_loss_anisotropy"], labels=labels,
                               title="Eval loss vs step, coloured by last-layer anisotropy")
  tops = tuple({"steps": [p["step"] for p in c], "normalized_top": [
      [p[f"top_{i}"] for i in range(100) if f"top_{i}" in p] for p in c]} for c in ck)
  figures.plot_spectrum_heatmap(tops, path["fig_spectrum_heatmap"], labels=labels)
  figures.plot_kl_uniform(ck, path["fig_kl_uniform"], labels=labels)
  plt = figure.pyplot()
  fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
  _scaling_panel(ax, rows, {r["fit_on"]: r for r in read_rows(out / "saturation_fit.csv")})
  loss = read_rows(out / "saturation_train_loss.csv")
  for r, lab in zip(rows, labels):
    recs = [x for x in loss if x["width"] == r["width"]]
    n = max(1, min(len(recs), len(recs) // 20))
    ax2.plot(np.array([x["step"] for x in recs], float)[n - 1:],
             smooth([x["loss"] for x in recs], n), label=lab)
  ax2.set(xscale="symlog", xlabel="training step (symlog)", title="Training loss",
          ylabel="train loss, moving average (nats)")
  ax2.legend(fontsize=7)
  figure.save(fig, out, "fig_scaling")


def _scaling_panel(ax, rows: list[dict], fits: dict) -> None:
  n = np.array([r["n_nonembedding"] for r in rows], float)
  for key, mk, c in (("final", "o", "C0"), ("best", "s", "C1")):
    ax.scatter(n, [r[f"{key}_eval_loss"] for r in rows], marker=mk, label=f"{key} eval loss",
               zorder=3, edgecolors=c, facecolors=[c if r["in_fit"] else "none" for r in rows])
    f = fits[key]
    if math.isfinite(f["alpha"]):
      nn = np.geomspace(n.min() / 1.5, n.max() * 1.5, 100)
      law = ScalingFit(f["A"], f["alpha"], f["E"], int(f["n_points"]), f["rmse"])
      ax.plot(nn, law.predict(nn), "-" if key == "final" else "--", color=c,
              label=f"fit on {key}: {f['A']:.3g}/N^{f['alpha']:.3f} + {f['E']:.3f}")
  for r in rows:
    ax.annotate(f"d={int(r['width'])}", (r["n_nonembedding"], r["final_eval_loss"]),
                fontsize=7, xytext=(3, 3), textcoords="offset points")
  ax.set(xscale="log", xlabel="non-embedding parameters N (filled: in the fit)",
         ylabel="eval loss (nats)", title="Scaling law L = A/N^alpha + E")
  ax.legend(fontsize=7)


RUN_COLUMNS = ("width", "n_nonembedding", "final_eval_loss", "best_eval_loss", "best_step",
               "rise", "late_rise", "rise_stat", "rise_ci_lo", "rise_ci_hi", "rise_verdict",
               "train_rise_stat", "in_fit", "gap_final_pct", "gap_final_ci_lo", "gap_final_ci_hi",
               "gap_final_with_head_pct", "gap_final_with_head_ci_lo",
               "gap_final_with_head_ci_hi", "kl_best", "kl_final")


def report(out, rel: str = ".") -> str:
  """The figures, the per-width table and the fits, from OUT's files."""
  rows = read_rows(out / "saturation_runs.csv")
  meta = json.loads((out / "saturation_meta.json").read_text())
  d, k = meta["data"], meta["knobs"]
  return "\n".join([
      f"{int(rows[0]['n_layers'])} layers, V={int(rows[0]['vocab_size'])}, "
      f"{int(rows[0]['steps'])} steps ({d['epochs']:.2f} epochs of {d['train_tokens']} "
      f"training tokens). rise_stat: the paired bootstrap over {k['eval_sequences']} fixed "
      f"validation windows, rise_verdict against {k['rise_threshold']} nats; late_rise: final − "
      f"best > {k['rise_tol']} nats; gaps in % of the law fitted on d ≥ {k['fit_min_width']}.",
      "", *[f"![{s}]({rel}/{figure.name(s)})" for s in FIGS], "",
      *md_table(rows, list(RUN_COLUMNS)), "",
      *md_table(read_rows(out / "saturation_fit.csv", text=("widths",)),
                ["fit_on", "widths", "A", "alpha", "E", "rmse", "n_points"], ".4g"),
      "", *scaling_lines(out, rows)])


def scaling_lines(out, rows: list[dict]) -> list[str]:
  """Each width below the fit: its gap (%) with its CI and leave-one-out range, the gaps with
  each fitted width left out, and the verdict of ``summary.scaling_verdict``."""
  v = json.loads((out / "summary.json").read_text())["scaling"]
  loo = read_rows(out / "saturation_loo.csv")
  lines = [f"Scaling verdict (the small widths lie above the law of the larger ones; supported "
           f"(refuted) when under both N counts every width below the fit has its gap CI and "
           f"its range over the fits leaving out one fitted width above (below) 0, else "
           f"undecided): **{v['verdict']}** (without the head: {v['sides']['final']}, with "
           f"it: {v['sides']['final_with_head']}; leave-one-out range crossing 0: d "
           f"{', '.join(map(str, v['loo_crosses_0'])) or 'none'})."]
  left = sorted({int(x["left_out"]) for x in loo})
  table = []
  for fit, _ in GAP_FITS:
    for r in (r for r in rows if not r["in_fit"]):
      w = int(r["width"])
      table.append({"fit_on": fit, "width": w, "gap_pct": r[f"gap_{fit}_pct"],
                    "ci": f"[{r[f'gap_{fit}_ci_lo']:+.2f}, {r[f'gap_{fit}_ci_hi']:+.2f}]",
                    "loo range": f"[{r[f'gap_{fit}_loo_lo']:+.2f}, {r[f'gap_{fit}_loo_hi']:+.2f}]",
                    **{f"without d{d}": x["gap_pct"] for d in left for x in loo
                       if x["fit_on"] == fit and int(x["width"]) == w and x["left_out"] == d}})
  cols = ["fit_on", "width", "gap_pct", "ci", "loo range", *[f"without d{d}" for d in left]]
  return lines + ([""] + md_table(table, cols, "+.2f") if table else [])


EXPERIMENT = Experiment("saturation", PRESETS, plan, measure=measure, measure_steps="all",
                        measure_chunk=64, tables=tables, figures=draw, report=report, doc=__doc__)
