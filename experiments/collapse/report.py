"""The collapse report: Fig. 1 (every metric vs validation loss) and the markdown section,
read only from the files of ``run`` (collapse_*.csv, collapse_meta.json, OUT/groups/).

After a budget stop (or a cut-off) the section covers the groups that finished: a first
paragraph names the stop, the groups finished and not run and how to resume; the tables are
computed over the finished runs with the code of a full run (``tables.write_tables``) and
marked "partial: over N of M runs", and no verdict is drawn from them. ``write_section``
writes OUT/section.md in both cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from .report_ceiling import ceiling_lines  # noqa: E402
from . import findings as F  # noqa: E402
from .measure import ANCHOR_SOURCE, ANCHORS, METRICS, POINTS  # noqa: E402
from .tables import column, min_counts, model_rows, write_tables  # noqa: E402
from ..shared import calls_text, fmt, read_rows, finish_figure, upath  # noqa: E402
from sbjax.atomic import atomic_write_text  # noqa: E402
from sbjax.studies import stats  # noqa: E402

FIGURE = "fig_collapse_vs_loss.png"
SECTION = "section.md"
META = "collapse_meta.json"


def figure(out: Path, note: str = "") -> Path:
  """Fig. 1 analogue: every metric vs validation loss at the smallest min_count, R² and r with
  its 95% interval (one point per run) on each panel; earlier snapshots drawn open; ``note``
  ends the title (a partial run's "partial: ...")."""
  mc0 = min_counts(out)[0]
  grid, seeds = model_rows(out, "grid", mc0), model_rows(out, "seeds", mc0, "last")
  y = column(grid, "val_loss")
  depths = sorted({int(r["n_layers"]) for r in grid})
  cmap = plt.get_cmap("viridis")
  ncol = 4
  nrow = -(-len(METRICS) // ncol)
  fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow))
  for ax, k in zip(axes.ravel(), METRICS):
    x = column(grid, k)
    for r, xi, yi in zip(grid, x, y):
      c = cmap(depths.index(int(r["n_layers"])) / max(len(depths) - 1, 1))
      last = int(r["last_snapshot"]) == 1
      ax.scatter(xi, yi, s=10 + 40 * math.log2(int(r["d_model"]) / 16 + 1) / 5,
                 color=c if last else "none", edgecolors=c, marker="o", alpha=0.8)
    for j, g in enumerate(dict.fromkeys(r["group"] for r in seeds)):  # one marker per shape
      sg = [r for r in seeds if r["group"] == g]
      ax.scatter(column(sg, k), column(sg, "val_loss"), s=12, color="red", marker="x+1"[j % 3])
    lm = np.asarray([int(r["last_snapshot"]) == 1 for r in grid], bool)
    s = stats.correlation_summary(x[lm], y[lm])
    ax.set_title(f"{k}\nR²={s['r2']:.2f}  {F.ci_text(s['pearson_r'], s['ci_lo'], s['ci_hi'])}",
                 fontsize=9)
    ax.set_ylabel("val loss", fontsize=8)
    ax.tick_params(labelsize=7)
    if k == "nc1_cdnv" and np.all(x[np.isfinite(x)] > 0):
      ax.set_xscale("log")
      ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  for ax in axes.ravel()[len(METRICS):]:
    ax.axis("off")
  title = (f"collapse metrics vs validation loss (min_count {mc0}; colour: depth; filled: "
           "last snapshot, open: earlier; size: width; red x, +: the seed groups' shapes)"
           + (f"\n{note}" if note else ""))
  return finish_figure(fig, upath(out) / FIGURE, title, dpi=100, fontsize=10)


def _f(v) -> str:
  return fmt(v, 3)


def _seed_lines(out: Path, meta: dict) -> list[str]:
  if not (out / "collapse_seeds.csv").exists():
    return []
  sd = read_rows(out / "collapse_seeds.csv")
  n = int(sd[0]["n"]) if sd else 0
  return (["", f"Seed-only groups ({n} data-order seeds per shape, last snapshot; is r ≠ 0 at "
           "fixed shape? by the 95% Fisher-z interval of r; two-sided permutation p-values, "
           f"{meta['n_permutations']} permutations; their Table 1):", "",
           "| group | metric | min_count | n | Pearson r | 95% CI of r | r ≠ 0? | R² | p |",
           "|---|---|---|---|---|---|---|---|---|"]
          + [f"| {_txt(r.get('group'))} | {r['metric']} | {int(r['min_count'])} | {int(r['n'])} | "
             f"{_f(r['pearson_r'])} | {_ci(r.get('ci_lo'), r.get('ci_hi'))} | "
             f"{F.seed_verdict(r.get('ci_lo'), r.get('ci_hi'))} | {_f(r['r2'])} | "
             f"{_f(r['p_perm'])} |" for r in sd])


def _ci(lo, hi) -> str:
  """'[lo, hi]' of an interval read back from CSV; '–' when undefined."""
  lo, hi = F._num(lo), F._num(hi)
  return f"[{lo:+.3f}, {hi:+.3f}]" if math.isfinite(lo) and math.isfinite(hi) else "–"


def _interval_lines(r2: list[dict], note: str = "") -> list[str]:
  """Every metric's r with its 95% interval and the partial r on log(parameters), one point
  per run, at every min_count (``note``: a partial run's mark, before the heading)."""
  rows = [r for r in r2 if r["points"] == "last" and "ci_lo" in r]
  if not rows:
    return []
  lines = ["", note + "Every correlation with validation loss, one point per run: n, Pearson "
           "r and its 95% Fisher-z interval (undefined at n ≤ 3), and the partial r with "
           "log(parameters) partialled out (the runs differ in size as well as in loss; its "
           "interval has one control, n ≤ 4 or one size: undefined):", "",
           "| metric | min_count | n | r | 95% CI | partial r (log params) | 95% CI |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['metric']} | {int(r['min_count'])} | {int(r['n'])} | "
                 f"{_f(r['pearson_r'])} | {_ci(r['ci_lo'], r['ci_hi'])} | {_f(r['partial_r'])} | "
                 f"{_ci(r['partial_ci_lo'], r['partial_ci_hi'])} |")
  return lines


def _r2_lines(r2: list[dict]) -> list[str]:
  """Every metric's R² side by side: min_count x (one point per run | all snapshots)."""
  by = {(int(r["min_count"]), r["points"], r["metric"]): r for r in r2}
  mcs = sorted({k[0] for k in by})
  cols = [(m, p) for p in POINTS for m in mcs]
  head = " | ".join(f"R² (r), min_count {m}, {'1 point/run' if p == 'last' else 'all snapshots'}"
                    for m, p in cols)
  lines = [f"| metric | {head} |", "|---" * (len(cols) + 1) + "|"]
  for k in METRICS:
    cells = " | ".join(f"{_f(by[(m, p, k)]['r2'])} ({_f(by[(m, p, k)]['pearson_r'])})"
                       for m, p in cols)
    lines.append(f"| {k} | {cells} |")
  return lines


def _txt(v) -> str:
  """A text cell read back from CSV ('' comes back as NaN): '–' when empty."""
  return v if isinstance(v, str) and v else "–"


def _anchor_cells(r: dict) -> str:
  """A row of the like-for-like table up to the authors' sign (the verdicts follow)."""
  return (f"| {r['metric']} | {int(r['min_count'])} | {int(r['n_runs'])} | {_f(r['r2'])} | "
          f"{_txt(r['sign'])} | {_f(r.get('pearson_r'))} {_ci(r.get('ci_lo'), r.get('ci_hi'))} "
          f"| {_f(r.get('partial_r'))} {_ci(r.get('partial_ci_lo'), r.get('partial_ci_hi'))} | "
          f"{_f(r['r2_all_snapshots'])} | {_f(r['authors_r2'])} | {_txt(r['authors_sign'])} |")


ANCHOR_HEAD = ("| metric | min_count | runs | our R² | our sign | r [95% CI] | partial r [95% CI] "
               "| R² all snapshots | authors' R² | authors' sign |")


def _anchor_lines(an: list[dict], note: str = "") -> list[str]:
  """The like-for-like table; a partial run (``note``) shows the numbers without the verdicts
  (a verdict over the finished groups would read as the experiment's answer)."""
  if note:
    return (["", f"{note}Like for like with the authors (their R² {ANCHOR_SOURCE}; ours: one "
             "point per run, its last snapshot, over the finished runs only; no verdict):", "",
             ANCHOR_HEAD, "|---" * 10 + "|"] + [_anchor_cells(r) for r in an])
  lines = ["", f"Like for like with the authors (their R² {ANCHOR_SOURCE}: the released results "
           "table of 230 TinyStories models, not a figure printed in the paper; ours: one point "
           "per run, its last snapshot; the all-snapshot R² beside it). The point verdict "
           "compares R² values; the interval verdicts judge the authors' sign by the 95% "
           "interval of r and of the partial r on log(parameters) (supported / refuted / "
           "undecided, the rule of the paragraph below):", "",
           ANCHOR_HEAD + " point verdict | interval verdict | partial verdict |",
           "|---" * 13 + "|"]
  for r in an:
    lines.append(_anchor_cells(r) + f" {r['verdict']} | {_txt(r.get('ci_verdict'))} | "
                 f"{_txt(r.get('partial_verdict'))} |")
  return lines


def _token_lines(tk: list[dict], kind: str = "grid") -> list[str]:
  lines = ["", f"Token-level view of the best {kind} model `{tk[0]['model']}` (their Table 5): "
           "per-class CDNV = mean over c' of s(c, c'), interference = mean cos(μ̃_c, μ̃_c').",
           "", "| rank | token | count | log10 CDNV_c | interference |", "|---|---|---|---|---|"]
  for r in tk:
    tok = (str(r["token"]).replace("\n", "\\n").replace("\t", "\\t")
           .replace("|", "\\|"))
    lines.append(f"| {_f(r['rank'])} | `{tok}` | {_f(r['count'])} | {_f(r['log10_cdnv'])} | "
                 f"{_f(r['interference'])} |")
  return lines


def _paragraph(an: list[dict], tk: list[dict], meta: dict, r2: list[dict],
               seeds: list[dict], last: list[dict], note: str = "", grid: bool = True) -> str:
  """What the data support and contradict, in words computed from the tables (findings.py);
  a partial run (``note``): no verdict sentence, only what was measured and why not more;
  no ``grid``: the seed groups' sentence only (the others judge the grid's tables)."""
  avg, top = tk[-1], tk[:-1]
  top_l = float(np.mean([r["log10_cdnv"] for r in top]))
  top_i = float(np.mean([r["interference"] for r in top]))
  refs = ", ".join(f"R² ≈ {a:g} for {k}" for k, (a, _, _) in ANCHORS.items()
                   if a is not None and not k.endswith(("_guarded", "_corrected")))
  gam = ", ".join(f"λ={k}: Γ={v:.2f}" for k, v in meta["weight_decay"]["gamma"].items())
  mcs = sorted({int(r["min_count"]) for r in an})
  sents = [f"The authors' released results give, over 230 TinyStories models, {refs}."]
  if note:
    sents += [f"{note}the run stopped before its end, so these tables are not the "
              "experiment's answer and no verdict is drawn from them; rerun the same command "
              "with the same --out for the rest."]
  elif not grid:
    sents += [F.seed_sentence(seeds, tuple(ANCHORS))]
  else:
    sents += [F.anchor_sentence(an, m) for m in mcs]
    sents += [F.interval_sentence(an, m) for m in mcs] + [F.sign_sentence(last)]
    sents += [F.norm_cov_sentence(an, seeds), F.counting_sentence(r2, tuple(ANCHORS)),
              F.seed_sentence(seeds, tuple(ANCHORS))]
  sents += [f"Weight-decay strength Γ = λ·Σ lr: {gam} "
            f"({meta['weight_decay']['steps']} steps per run).",
            f"The most frequent tokens have mean log10 CDNV_c {top_l:.2f} vs "
            f"{float(avg['log10_cdnv']):.2f} for the average token and interference "
            f"{top_i:.3f} vs {float(avg['interference']):.3f}.",
            "These models are orders of magnitude smaller and shorter-trained than the "
            "authors'." + ("" if note else " The point verdicts ('agrees', 'disagrees', "
            "'weaker') compare R² values without an interval; what the data decide is the "
            "interval verdicts: 'supported' or 'refuted' is a finding at this scale, "
            "'undecided' is not a finding either way.")]
  return " ".join(s for s in sents if s)


def progress(out: Path, meta: dict) -> tuple[list[dict], list[dict]]:
  """(finished, not run): the preset's groups (collapse_meta.json's ``groups``, each
  {name, kind, runs}) with and without their record in OUT/groups/; a folder written before
  ``groups`` was recorded only by a whole run: ([], [])."""
  gs = meta.get("groups") or []
  done = [g for g in gs if (upath(out) / "groups" / f"{g['name']}.json").exists()]
  return done, [g for g in gs if g not in done]


def partial_text(finished: list[dict], not_run: list[dict]) -> str:
  """"partial: over N of M grid runs (and K of L seeds runs)" when groups did not finish,
  else ""."""
  if not not_run:
    return ""
  n = lambda gs, kind: sum(g["runs"] for g in gs if g["kind"] == kind)  # noqa: E731
  parts = [f"{n(finished, k)} of {n(finished + not_run, k)} {k} runs"
           for k in ("grid", "seeds") if n(finished + not_run, k)]
  return f"partial: over {' and '.join(parts)}"


def _groups_text(gs: list[dict]) -> str:
  return ", ".join(f"{g['name']} ({g['runs']} runs)" for g in gs) or "none"


def stop_lines(meta: dict, finished: list[dict], not_run: list[dict]) -> list[str]:
  """Why the section covers only some groups, the budget clock's estimates and how to resume
  ([] when every group finished)."""
  if not not_run:
    return []
  why = (f"**The run stopped at its time budget ({float(meta['knobs']['budget_s']):g} s)**: "
         f"{meta['stopped']}." if meta.get("stopped") else "**The run did not reach its end** "
         "(no budget stop was recorded: it was cut off or failed).")
  est = "; ".join(f"{k}: {v['steps']} steps at {v['s_per_step']:.4g} s/step, ending at "
                  f"~{v['projected_end_s']:g} s of its call" for k, v in
                  (meta.get("estimates") or {}).items())
  cover = ("The figure and tables below cover the finished groups only." if finished else
           "No group finished, so this section has no tables and no figure.")
  return [f"{why} Groups finished: {_groups_text(finished)}; not finished: "
          f"{_groups_text(not_run)}. "
          f"{cover} The budget clock's estimates in the last call: {est or 'none recorded'}. "
          "Rerun the same command with the same --out to resume: the finished groups "
          "(OUT/groups/) are kept and only the groups not run train.", ""]


def _body(out: Path, rel: str, meta: dict, partial: str) -> list[str]:
  """The figure, the tables and the paragraph (over the runs of collapse_models.csv);
  ``partial`` (``partial_text``) marks each table and the figure."""
  figure(out, partial)
  note = f"**{partial[0].upper()}{partial[1:]}** — " if partial else ""
  r2 = read_rows(out / "collapse_r2.csv")
  grid = model_rows(out, "grid", min_counts(out)[0])
  n_runs = len({r["run"] for r in grid})
  sg = model_rows(out, "seeds", min_counts(out)[0], "last")
  sgs = {g: sum(r["group"] == g for r in sg) for g in dict.fromkeys(r["group"] for r in sg)}
  seed_txt = (" and seed-only groups " + ", ".join(f"{g} ({n} seeds)" for g, n in sgs.items())
              if sgs else "")
  lines = [f"{n_runs} grid runs, {len(grid)} snapshots{seed_txt} (preset `{meta['preset']}`, "
           "vocabulary "
           f"{meta['vocab_size']}, {meta['train_tokens']} training tokens per epoch, "
           f"{meta['val_tokens']} validation tokens, min_count "
           + " and ".join(str(m) for m in meta["min_counts"]) + "; settings: "
           + ", ".join(f"{k}={v}" for k, v in meta["settings"].items()) + "). Run time "
           f"of the run call: {meta['seconds']} s wall, {meta.get('cpu_seconds', '–')} s CPU of "
           "this process (groups reused from an earlier call cost nothing here).", "",
           f"![collapse metrics vs validation loss]({rel}/{FIGURE})", ""]
  an = read_rows(out / "collapse_anchors.csv")
  if n_runs:
    lines += ([note + "R² of every metric vs validation loss:", ""] if note else [])
    lines += _r2_lines(r2) + _interval_lines(r2, note) + _anchor_lines(an, note)
  else:
    lines += [NO_GRID]
  lines += _seed_lines(out, meta)
  tk = read_rows(out / "collapse_tokens.csv", text=("token",))  # a piece "1" is not 1.0
  seeds = read_rows(out / "collapse_seeds.csv") if (out / "collapse_seeds.csv").exists() else []
  last = model_rows(out, "grid", min_counts(out)[0], "last")
  return (lines + _token_lines(tk, "grid" if n_runs else "seed-group")
          + ["", _paragraph(an, tk, meta, r2, seeds, last, note, grid=bool(n_runs))])


# the section of a preset without a grid (gpu: seed groups only), instead of empty grid tables
NO_GRID = ("This preset trains no grid of shapes, only seed groups: the correlations across "
           "shapes (R², their intervals, the partial r on log(parameters)) and the like-for-like "
           "comparison with the authors come from a run with a grid (on the device: "
           "`--preset=gpu-grid`); here the seed groups say whether each metric follows the "
           "loss at one fixed shape.")


def read_meta(out: Path) -> dict:
  path = upath(out) / META
  if not path.exists():
    raise FileNotFoundError(f"{path} is missing: the collapse run did not start there (or "
                            "--out names another folder); run python -m experiments.collapse "
                            "with this --out first")
  return json.loads(path.read_text())


def report_section(out: Path, rel: str) -> str:
  """The markdown section of the report (the figure drawn now; numbers from the CSVs): after
  a stop, of the finished groups, opened by the stop paragraph (``stop_lines``)."""
  out = upath(out)
  meta = read_meta(out)
  finished, not_run = progress(out, meta)
  lines = ["## Linguistic collapse (Wu & Papyan 2024)", ""]
  lines += stop_lines(meta, finished, not_run)
  said = calls_text(meta.get("runs") or [])
  lines += [*said, ""] if said else []
  if finished or not not_run:
    lines += _body(out, rel, meta, partial_text(finished, not_run))
    lines += ceiling_lines(out, rel)
  return "\n".join(lines) + "\n"


def write_section(out: Path) -> Path:
  """OUT/section.md (figures at ``./``), after a whole run or a budget stop (or cut-off): a
  run that did not finish gets its tables recomputed over the finished groups first
  (``tables.write_tables``, the code of a whole run); returns the path."""
  out = upath(out)
  meta = read_meta(out)
  finished, not_run = progress(out, meta)
  if finished and (not_run or not (out / "collapse_r2.csv").exists()):
    write_tables(out, int(meta["n_permutations"]))
  atomic_write_text(out / SECTION, report_section(out, "."))
  return out / SECTION
