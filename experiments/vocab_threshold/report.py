"""vocab_threshold's report: the figure (loss ratio vs rank per V; r* and r_0.6 vs V with the
fits) and the markdown section, read only from vocab_threshold.csv, runs.csv, fit.json and
vocab_threshold_meta.json. A run that stopped before its end (a budget stop, exit status 75, or
a cut-off) has no fit.json: the section then covers the V that finished, says which did not
run and how to resume, and fits r*(V) over the finished V only, marked partial (no fit below
two V). One that stopped before any V finished has no table: its section says so, gives the
budget clock's estimates and the V not run, and how to resume (no figure, no fit). When more
than one call wrote the folder (a rerun after a stop), the section lists the calls."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
import numpy as np  # noqa: E402

from ..shared import calls_text, fmt, read_rows, finish_figure, upath  # noqa: E402
from sbjax.atomic import atomic_write_text  # noqa: E402
from . import bigram_n_report  # noqa: E402
from .corpus_limits import corpus_sentence  # noqa: E402
from .head_lrs import head_lr_section  # noqa: E402
from .measure import grid_interval, loglog_fit, slope_range  # noqa: E402
from .presets import TOL, TOL_CHAR, W_LEVEL  # noqa: E402

NAME = "vocab_threshold"
FIGURE = "fig_vocab_threshold.png"
TABLE_CSV = "vocab_threshold.csv"
RUNS_CSV = "runs.csv"
NGRAM_CSV = "ngram.csv"  # the exact bigram fits per V and rank (with n-gram knobs)
FIT = "fit.json"
META = "vocab_threshold_meta.json"  # the preset's V, those not run yet, a budget stop (run.py)
SECTION = "section.md"
PAPER = ("Godey et al. (2024) find that heads below about 1000 dimensions hurt Pythia models "
         "(V = 50k); whether that threshold depends on V was left open.")


def table_fit(table: list) -> dict:
  """fit.json: the log-log fits of r* and r_0.6 (and the exact bigram r*, when the table has
  it) over the table's V (measure.loglog_fit), the censored counts and the tolerances."""
  v = [float(t["V"]) for t in table]
  fit = {"r_star": loglog_fit(v, [float(t["r_star"]) for t in table]),
         "r_werror06": loglog_fit(v, [float(t["r_werror06"]) for t in table])}
  if table and "r_star_ngram" in table[0]:
    fit.update(r_star_ngram=loglog_fit(v, [float(t["r_star_ngram"]) for t in table]),
               n_censored_ngram=sum(int(t["ngram_censored"]) for t in table))
  return {**fit, "n_censored": sum(int(t["censored"]) for t in table), "tol": TOL,
          "tol_char": TOL_CHAR, "w_level": W_LEVEL}


def read_meta(out: Path) -> dict:
  """vocab_threshold_meta.json ({} for a run that predates it)."""
  return json.loads((out / META).read_text()) if (out / META).exists() else {}


def not_run(out: Path, table: list) -> list[int]:
  """The preset's V that have no row in the table (the run stopped before them)."""
  done = {int(t["V"]) for t in table}
  return [int(v) for v in read_meta(out).get("vocabs", []) if int(v) not in done]


def read_fit(out: Path, table: list) -> dict:
  """fit.json of a finished run (recomputed from the table when a cut-off came after its last
  V but before fit.json); with V not run, the fit over the finished V, ``partial``: True."""
  if not_run(out, table):
    return {**table_fit(table), "partial": True}
  return json.loads((out / FIT).read_text()) if (out / FIT).exists() else table_fit(table)


def _ratio_panel(ax, table: list, runs: list, tol: float) -> None:
  for i, t in enumerate(table):
    v = int(t["V"])
    sel = sorted((r for r in runs if int(r["V"]) == v and r["protocol"] == "b" and int(r["best"])
                  and r["head"] == "lowrank"), key=lambda r: r["rank"])
    xs = [r["rank"] for r in sel] + [t["d_model"]]
    ys = [r["eval_loss"] / t["full_loss"] for r in sel] + [1.0]
    ax.plot(xs, ys, "o-", color=f"C{i}", label=f"V={v}")
  ax.axhline(1 + tol, color="k", ls=":", label=f"+{100 * tol:.0f}%")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("head rank r (last point: dense)")
  ax.set_ylabel("val loss / full-rank val loss")
  ax.legend(fontsize=7)


def _fit_panel(ax, table: list, fit: dict) -> None:
  vs = np.array([t["V"] for t in table], float)
  keys = [("r_star", "o", "r* (trained)"), ("r_werror06", "s", "W-error = 0.6")]
  keys += [("r_star_ngram", "^", "r* (exact bigram)")] if "r_star_ngram" in fit else []
  for key, marker, name in keys:
    f = fit[key]
    beta = (f": beta={f['beta']:.2f} ± {f['beta_se']:.2f}" if math.isfinite(f["beta"])
            else ": no fit")
    ax.plot(vs, [t[key] for t in table], marker,
            label=name + beta + (" (partial)" if fit.get("partial") else ""))
    if math.isfinite(f["beta"]):
      ax.plot(vs, np.exp(f["log_c"]) * vs ** f["beta"], "--", color=ax.lines[-1].get_color())
  ax.set_xscale("log", base=2)
  ax.set_yscale("log", base=2)
  ax.set_xlabel("vocabulary size V")
  ax.set_ylabel("rank")
  ax.legend(fontsize=7)


def draw(out: Path) -> Path:
  out = upath(out)
  table = read_rows(out / TABLE_CSV)
  fit = read_fit(out, table)
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  _ratio_panel(axes[0], table, read_rows(out / RUNS_CSV), fit["tol"])
  _fit_panel(axes[1], table, fit)
  return finish_figure(fig, out / FIGURE, "Rank needed vs vocabulary size", dpi=110)


def _ngram_cell(t: dict) -> str:
  if t.get("r_star_ngram") in (None, ""):
    return "–"
  cens = " (censored)" if int(t["ngram_censored"]) else ""
  return f"{int(t['r_star_ngram'])}{cens}"


def _ngram_fit(fit: dict) -> str:
  g = fit.get("r_star_ngram")
  if g is None:
    return ""
  return (f" The exact add-k bigram r* (fitted on train counts, scored on validation counts, "
          f"same tolerance) gives beta = {g['beta']:.3f} ± {g['beta_se']:.3f} "
          f"({fit['n_censored_ngram']} censored at the largest rank).")


def _grid_slopes(v: list, grids: list, r_stars: list) -> tuple[float, float]:
  """measure.slope_range over the (lo, hi] grid interval of each V's r*."""
  lo, hi = zip(*(grid_interval(g, r) for g, r in zip(grids, r_stars)))
  return slope_range(v, lo, hi)


def _grid_text(out: Path, table: list) -> str:
  """The slopes the rank grids allow (measure.slope_range), and whether r* ≤ d binds."""
  v = [int(t["V"]) for t in table]
  lo, hi = _grid_slopes(v, [t["ranks"].split() for t in table],
                        [int(t["r_star"]) for t in table])
  text = (f" On its rank grid each trained r* is only known to lie in (next grid rank below, "
          f"r*], so any beta in [{lo:.3f}, {hi:.3f}] fits the trained r* (the standard error "
          "above ignores the grid width).")
  ngram = read_rows(out / NGRAM_CSV) if (out / NGRAM_CSV).exists() else []
  with_ngram = [t for t in table if t.get("r_star_ngram") not in (None, "")]
  if ngram and len(with_ngram) == len(table):
    nlo, nhi = _grid_slopes(v, [[r["rank"] for r in ngram if int(r["V"]) == x] for x in v],
                            [int(t["r_star_ngram"]) for t in table])
    text += f" For the bigram r* the grid allows [{nlo:.3f}, {nhi:.3f}]."
    over = [int(t["V"]) for t in table if int(t["r_star_ngram"]) > int(t["d_model"])]
    if over:
      text += (f" The trained r* is measured against the rank-d head, so it cannot exceed d; at "
               f"V = {', '.join(map(str, over))} the exact bigram already needs more than d, so "
               "there the trunk's width, not the head, limits the trained models, and a flat "
               "trained r*(V) is not evidence that the rank a head needs stays constant.")
  return text


def trunk_sentence(table: list) -> str:
  """How protocol (a)'s heads were trained, when not as separate runs on the last step."""
  best = [t for t in table if t.get("trunk") == "best"]
  pop = any(int(t.get("head_population") or 0) for t in table)
  text = ""
  if best:
    at = "; ".join(f"V = {int(t['V'])}: step {int(t['trunk_step'])}, validation loss "
                   f"{fmt(t['trunk_eval_loss'], spec='.4f')}" for t in best)
    text += (f"The protocol-(a) heads sit on each trunk's best validation checkpoint ({at}); "
             "the full-rank loss in the table is the dense run's last step.")
  if pop:
    text += (" At each V the heads of every rank and head lr trained as one population of "
             "padded heads (one compile; sbjax.heads.padded_lowrank: each equals its separate "
             "rank-r run up to the order of its sums).")
  low = sorted({t["dtype"] for t in table if t.get("dtype") not in (None, "", "float32")})
  if low:
    text += (f" The models computed in {', '.join(low)} (parameters, softmax and loss in "
             "float32).")
  return text.strip()


def stop_paragraph(out: Path, table: list) -> str:
  """Why the section covers only some of the preset's V, and how to resume ("" when every V
  ran)."""
  missing = not_run(out, table)
  if not missing:
    return ""
  meta = read_meta(out)
  done = ", ".join(str(int(t["V"])) for t in table) or "none"
  why = (f"**The run stopped at its time budget ({meta['budget_s']:g} s)**: {meta['stopped']}."
         if meta.get("stopped") else "**The run did not reach its end** (no budget stop was "
         "recorded: it was cut off or failed).")
  return (f"{why} V finished: {done}; not run: {', '.join(map(str, missing))}. The table, the "
          "figure and the fit below cover the finished V only and say nothing about r* at the "
          "V not run. " + _resume_text(meta))


def _resume_text(meta: dict) -> str:
  data = f" --data={meta['data']}" if meta.get("data") else ""
  return ("Rerun the same command with the same --out to resume (here `python -m "
          f"experiments.vocab_threshold --preset={meta.get('preset', '?')}{data} --out=<this "
          "folder>`, or the same `bash benchmarks/device_science.sh vocab_threshold` call on "
          "the still-warm machine): the finished runs and the checkpoints saved so far are "
          "kept, and only what is missing trains.")


def _estimates_text(meta: dict) -> str:
  """The budget clock's estimates of every call (meta's ``runs``; the top level for a meta
  without them): per run, s/step, its steps and its projected end."""
  calls = meta.get("runs") or [meta]
  said = []
  for i, r in enumerate(calls):
    est = "; ".join(f"run {name}: {e['s_per_step']:.4g} s/step over its {e['steps']} steps, "
                    f"projected to end ~{e['projected_end_s']:g} s into the call"
                    for name, e in (r.get("estimates") or {}).items())
    if est:
      said.append((f"call {i + 1}: " if len(calls) > 1 else "") + est)
  if not said:
    return "No time estimate was recorded (no run reached its estimate)."
  return (f"The budget clock's estimates (each measured over {meta.get('estimate_at', '?')} "
          f"steps, after {meta.get('estimate_warmup', '?')} untimed steps with the compiles): "
          + "; ".join(said) + ".")


def none_finished(out: Path) -> str:
  """The section of a run that has no table: no V finished (a budget stop or a cut-off in
  the first V's sweep), from vocab_threshold_meta.json only."""
  meta = read_meta(out)
  vocabs = ", ".join(str(int(v)) for v in meta.get("not_run") or meta.get("vocabs") or [])
  why = (f"**The run stopped at its time budget ({meta['budget_s']:g} s) before any V "
         f"finished**: {meta['stopped']}." if meta.get("stopped") else "**No V finished** "
         "(no budget stop was recorded: the run was cut off, failed or is still running).")
  lines = [f"## {NAME}", "", f"{why} Not run: {vocabs or 'unknown (no record of the run)'}. "
           "There is no table, figure or fit: nothing is said about r* at any V.", "",
           _estimates_text(meta), "", _resume_text(meta)]
  return "\n".join(lines + ["", *calls_text(meta.get("runs") or [])]).rstrip() + "\n"


def _table_lines(table: list) -> list[str]:
  lines = ["| V | d | full-rank val loss | reference | chars/token | tol (nats/token) | r* | "
           "loss at r* | r at W-error 0.6 (centred) | exact bigram r* |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for t in table:
    cens = " (censored)" if int(t["censored"]) else ""
    lines.append(f"| {int(t['V'])} | {int(t['d_model'])} | {fmt(t['full_loss'], spec='.4f')} | "
                 f"{t.get('reference', 'dense')} | {fmt(t.get('chars_per_token'), spec='.3f')} | "
                 f"{fmt(t.get('tol_token'), spec='.4f')} | "
                 f"{int(t['r_star'])}{cens} | {fmt(t['loss_at_r_star'], spec='.4f')} | "
                 f"{int(t['r_werror06'])} | {_ngram_cell(t)} |")
  return lines


def _fit_text(out: Path, table: list, fit: dict) -> str:
  """The fit of r*(V) in words: none below two V, marked partial when V are missing."""
  b, w = fit["r_star"], fit["r_werror06"]
  define = (f"r* is the smallest rank within {fit.get('tol_char', '?')} nats per character "
            "(converted per V through its tokenizer) of the reference head (the protocol-(a) "
            "rank-d head when the sweep has one, else the dense head); the W-error is that of "
            "the centred dense head. These are small models (d far below V), so the rank grid "
            "is coarse (factors of 2) and the runs are short")
  if b["n"] < 2:
    return (f"No fit of r* against V: it needs two V or more, and {b['n']} finished. "
            + define + ".")
  rejected = math.isfinite(b["beta_se"]) and abs(b["beta"]) > 2 * b["beta_se"]
  verdict = (f"A constant threshold (beta = 0) is {'rejected' if rejected else 'not rejected'} "
             "at two standard errors for r*. ")
  if fit.get("partial"):
    verdict = "Whether a constant threshold (beta = 0) holds is not tested on a partial run. "
  return ((f"Partial fit, over the V that finished only ({b['n']} of them): " if
           fit.get("partial") else "")
          + f"sbjax here: r* ∝ V^beta with beta = {b['beta']:.3f} ± {b['beta_se']:.3f} "
          f"(n = {b['n']}, {fit['n_censored']} censored at d); the rank at W-error 0.6 gives "
          f"beta = {w['beta']:.3f} ± {w['beta_se']:.3f}." + _ngram_fit(fit)
          + _grid_text(out, table) + "\n" + verdict + define + "; read beta as a trend.")


def report_section(out: Path, rel: str) -> str:
  out = upath(out)
  bigram = bigram_n_report.section(out, rel)
  if not (out / TABLE_CSV).exists():  # the bigram r*(V, N) presets, or no V finished
    return f"## {NAME}\n\n" + bigram if bigram else none_finished(out)
  table = read_rows(out / TABLE_CSV)
  stop = stop_paragraph(out, table)
  lines = ([f"## {NAME}", ""] + ([stop, ""] if stop else []) + [f"![rank vs V]({rel}/{FIGURE})", ""]
           + _table_lines(table) + ["", PAPER, "", _fit_text(out, table, read_fit(out, table))])
  lrs = head_lr_section(read_rows(out / RUNS_CSV), table) if (out / RUNS_CSV).exists() else []
  if lrs and len(table) < 2:  # its last line reads r*_lr across V: not with one V
    lrs = lrs[:-1] + ["With one V finished, whether r\\*_lr is flat in V is not known."]
  limits = corpus_sentence(table)
  trunk = trunk_sentence(table)
  calls = calls_text(read_meta(out).get("runs") or [])
  return ("\n".join(lines + ([trunk] if trunk else []) + (["", *lrs] if lrs else [])
                    + (["", limits] if limits else []) + (["", *calls] if calls else []))
          + "\n" + ("\n" + bigram if bigram else ""))


def write_section(out: Path) -> Path:
  """OUT/section.md (figures at ``./``); the figure is drawn again first when the run stopped
  before its end (run.py draws it only at the end), and none when no V finished (no table)."""
  out = upath(out)
  if (out / TABLE_CSV).exists() and (not_run(out, read_rows(out / TABLE_CSV))
                                     or not (out / FIGURE).exists()):
    draw(out)
  atomic_write_text(out / SECTION, report_section(out, "."))
  return out / SECTION
