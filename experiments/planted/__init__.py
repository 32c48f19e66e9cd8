r"""``planted``: the exact rank floor and the knee on a planted-rank language (part 1), and MoS
against the parameter-matched lowrank head on a high-rank planted language (part 2).

Part 1. The planted language (logits ``alpha U Vᵀ/√k + 1 bᵀ`` of rank k + 1, exact entropy H)
is learnt with a bias-free rank-r head for every r of the preset, each measured against the
exact floor (``sbjax.studies.floor``)

    floor(r) = min_{rank L ≤ r} Σ_c π_c CE(P(·|c), softmax(L_c)),   floor(r) = H for r ≥ k + 1,

by ``eval_loss`` (sampled targets) and ``expected_loss`` = Σ_t Σ_w P(w|c_t)(−log q_t(w)) / n
(``expected_loss − H`` is the mean KL(P ‖ q)); decisions: ``stats.knee_checks``.

Part 2. Arms (a head at one shape), each one population of init seeds × lrs, on a planted
mixture language; the lowrank arm's rank matches the MoS arm's head parameters. Decisions:
``stats`` (per cell Welch intervals; with ``fresh_seeds`` each arm retrained at its chosen lr
on new seeds, planted_fresh.csv, and the pre-registered ``presets.FreshRule``).

Outputs: planted.csv, planted_floor.csv, planted_mix.csv, planted_fresh.csv,
planted_mix_floor*.csv, planted_fig8.csv (Godey et al. Fig. 8), planted_meta.json,
summary.json and the figures.
"""

from __future__ import annotations

import json
import math

from sbjax.experiment import Experiment, Group, figure
from sbjax.heads import head_param_count
from sbjax.studies.floor import floor_curve
from sbjax.studies.head_flops import head_flops

from ..common import best_lr, fmt, md_table, mean, read_rows, welch_line, write_json, write_rows
from . import fig8, stats
from .configs import (cell_of, fresh_runs, has_rank, knee_configs, mix_configs, mix_groups,
                      settings, validate)
from .measure import measure as measure_run, selection_batches
from .presets import PRESETS

CSV_KNEE, CSV_FLOOR, CSV_MIX, META = ("planted.csv", "planted_floor.csv", "planted_mix.csv",
                                      "planted_meta.json")
CSV_FRESH = "planted_fresh.csv"


def plan(ctx):
  p = ctx.preset
  validate(p)
  if "knee" in p.knobs.parts:
    for r, cfg in knee_configs(p):
      yield Group(f"r{r}", [cfg], [{"part": "knee", "rank": r}])
  if "mix" in p.knobs.parts:
    arms = mix_groups(mix_configs(p))
    for arm, runs in arms:
      yield Group(f"mix-{arm}", [c for _, c in runs],
                  [{"part": "mix", "label": label, "arm": arm} for label, _ in runs])
    for arm, runs in arms if p.knobs.fresh_seeds else ():
      fresh = fresh_runs(p, runs, _chosen_lr(ctx, f"mix-{arm}"))
      yield Group(f"fresh-{arm}", [c for _, c in fresh],
                  [{"part": "fresh", "label": label, "arm": arm} for label, _ in fresh])


def _chosen_lr(ctx, name: str) -> float:
  """The lr the arm trained as group ``name`` chose (``stats.arms``'s rule)."""
  g = ctx.groups[name]
  h, gaps = ctx.dataset(g.configs[0]).planted.entropy, {}
  for m in ctx.measured[name]:
    gaps.setdefault(g.configs[m["member"]].train.lr, []).append(
        m.get("sel_expected_loss", m["expected_loss"]) - h)
  return best_lr({lr: mean(x) for lr, x in gaps.items()})


def measure_final(ctx, group, j, steps, params):
  """The final checkpoint on the validation stream (and the selection stream: sel_*)."""
  cfg, k = group.configs[j], ctx.knobs
  ds = ctx.dataset(cfg)
  res = measure_run(cfg, params[0], ds.planted, ds.eval_batches(k.measure_batches))
  if k.select_batches:
    sel = selection_batches(ds.planted, k.select_batches, cfg.train.batch_size,
                            cfg.train.seq_len, cfg.data.options.seed)
    res.update({f"sel_{n}": v for n, v in measure_run(cfg, params[0], ds.planted, sel).items()})
  return [res]


def _floors(ctx, name: str, lang, ranks) -> list[dict]:
  """The exact floors of ``lang`` at ``ranks``, computed once (``ctx.memo``)."""
  k = ctx.knobs
  key = {"lang": lang.info(), "ranks": sorted(set(ranks)), "gtol": k.floor_gtol,
         "n_random": k.floor_random, "n_wide": k.floor_wide}

  def compute():
    res = floor_curve(lang, ranks, gtol=k.floor_gtol, max_iter=k.floor_max_iter, restarts=2,
                      require_converged=False, n_random=k.floor_random, n_wide=k.floor_wide)
    return [{**r.row(), "converged": str(bool(r.converged))} for r in res]
  rows = ctx.memo(name, key, compute)
  write_rows(ctx.out / f"{name}.csv", rows)
  return rows


def _knee_rows(ctx, groups) -> tuple:
  cfg = groups[0].configs[0]
  lang = ctx.dataset(cfg).planted
  floor_rows = _floors(ctx, "planted_floor", lang, [g.labels[0]["rank"] for g in groups]
                       + [lang.vocab])
  floors = {int(r["rank"]): float(r["floor"]) for r in floor_rows}
  rows = []
  for g in groups:
    r, res = g.labels[0]["rank"], ctx.measured[g.name][0]
    rows.append({"rank": r, "eval_loss": res["eval_loss"], "eval_acc": res["eval_acc"],
                 "expected_loss": res["expected_loss"], "floor": floors[r], "H": lang.entropy,
                 "gap": res["expected_loss"] - lang.entropy,
                 "floor_gap": floors[r] - lang.entropy})
  write_rows(ctx.out / CSV_KNEE, rows)
  return lang, floor_rows, rows


def _mix_row(cfg, label, arm, res, lang, floors, cell) -> dict:
  lowrank = has_rank(cfg)
  fl = floors[cfg.model.rank] if lowrank else math.nan
  row = {"label": label, "arm": arm, "seed": cfg.train.seed, "lr": cfg.train.lr,
         "head": cfg.model.head.kind, "d_model": cfg.model.d_model,
         "rank": cfg.model.rank if lowrank else 0,
         "n_mix": 0 if lowrank else getattr(cfg.model.head, "n_mix", 1),
         "head_params": head_param_count(cfg.model), "eval_loss": res["eval_loss"],
         "eval_acc": res["eval_acc"], "expected_loss": res["expected_loss"], "floor": fl,
         "H": lang.entropy, "gap": res["expected_loss"] - lang.entropy,
         "floor_gap": fl - lang.entropy}
  if cell[0] is not None:
    row.update({"lang": cell[0], "objective": cell[1], "run": cell[2],
                "head_flops": head_flops(cfg.model), "sel_eval_loss": res["sel_eval_loss"],
                "sel_expected_loss": res["sel_expected_loss"],
                "sel_gap": res["sel_expected_loss"] - lang.entropy})
  return row


def _mix_rows(ctx, groups, csv: str = CSV_MIX) -> dict:
  """Writes ``csv`` and each language's lowrank floors; returns {language name: (language,
  floor rows)} (name None for a preset without cells)."""
  cells, langs, rows = cell_of(ctx.preset), {}, []
  for g in groups:
    cell = cells[g.labels[0]["arm"]]
    if cell[0] not in langs:
      same = [c for h in groups if cells[h.labels[0]["arm"]][0] == cell[0] for c in h.configs]
      lang = ctx.dataset(same[0]).planted
      ranks = sorted({c.model.rank for c in same if has_rank(c)})
      name = "planted_mix_floor" + ("" if cell[0] is None else f"_{cell[0]}")
      langs[cell[0]] = (lang, _floors(ctx, name, lang, ranks) if ranks else [])
    lang, fl = langs[cell[0]]
    floors = {int(r["rank"]): float(r["floor"]) for r in fl}
    for cfg, lab, res in zip(g.configs, g.labels, ctx.measured[g.name]):
      rows.append(_mix_row(cfg, lab["label"], lab["arm"], res, lang, floors, cell))
  write_rows(ctx.out / csv, rows)
  return langs


def tables(ctx) -> None:
  groups = list(ctx.groups.values())
  knee = [g for g in groups if g.labels[0]["part"] == "knee"]
  mix = [g for g in groups if g.labels[0]["part"] == "mix"]
  fresh = [g for g in groups if g.labels[0]["part"] == "fresh"]
  meta, summary, f8 = {"preset": ctx.preset_name, "settings": settings(ctx.preset)}, {}, {}
  if knee:
    lang, floor_rows, rows = _knee_rows(ctx, knee)
    s = ctx.knobs
    summary.update(stats.knee_checks(rows, int(lang.info()["rank"]), s.tol, s.margin))
    meta["language"], f8["language"] = lang.info(), (lang, floor_rows)
    dense = next((g for g in knee if g.labels[0]["rank"] == g.configs[0].model.d_model), None)
  langs = _mix_rows(ctx, mix) if mix else {}
  meta["languages"] = {str(n): lang.info() for n, (lang, _) in langs.items()}
  if None in langs:
    f8["mixture"] = langs[None]
  summary["mix"] = stats.mix_summary(read_rows(ctx.out / CSV_MIX)) if mix else None
  if fresh:
    _mix_rows(ctx, fresh, CSV_FRESH)
    summary["fresh"] = stats.fresh_summary(ctx.knobs.rule, read_rows(ctx.out / CSV_MIX),
                                           read_rows(ctx.out / CSV_FRESH))
  write_json(ctx.out / META, meta)
  write_json(ctx.out / "summary.json", summary)
  gaps = {r["rank"]: r["gap"] for r in rows} if knee else {}
  dense_wd = ctx.workdirs(dense)[0] if knee and dense is not None else None
  write_rows(ctx.out / fig8.CSV, fig8.rows(f8, dense_wd, gaps))


def _draw_knee(out, rows, s) -> None:
  """loss − H against the head rank: trained (expected and sampled) and the exact floor."""
  plt = figure.pyplot()
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  r, h = [x["rank"] for x in rows], s["H"]
  ax.plot(r, [x["expected_loss"] - h for x in rows], "o-", label="trained: expected loss − H")
  ax.plot(r, [x["eval_loss"] - h for x in rows], "x", color="C0", alpha=0.5,
          label="trained: sampled loss − H")
  ax.plot(r, [max(x["floor_gap"], 1e-6) for x in rows], "s--", color="C3",
          label="exact floor(r) − H (1e-6 where 0)")
  ax.axvline(s["k"] + 1, color="gray", ls=":", lw=0.8, label=f"k + 1 = {s['k'] + 1}")
  ax.axhline(s["tol"], color="k", ls=":", lw=0.8, label=f"tolerance {s['tol']}")
  if s["knee"] is not None:
    ax.axvline(s["knee"], color="C2", lw=1, label=f"knee r = {s['knee']}")
  ax.set(yscale="log", xlabel="head rank r", ylabel="loss − H (nats)")
  ax.set_xscale("log", base=2)
  ax.legend(fontsize=7)
  figure.save(fig, out, "fig_planted_knee", f"planted language, k = {s['k']}")


def _draw_mix(out, rows) -> None:
  plt = figure.pyplot()
  groups = stats.cells(rows) if "lang" in rows[0] else [(("mix", ""), rows)]
  fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), squeeze=False)
  for ax, ((lang, obj), rs) in zip(axes[0], groups):
    a = stats.arms(rs)
    for i, x in enumerate(a):
      ax.bar(i, x["mean"], color="C1" if x["head"] == "mos" else "C0", alpha=0.6)
      ax.plot([i] * x["n"], x["gaps"], "k.", ms=4)
      if math.isfinite(x["floor_gap"]):
        ax.plot([i - 0.4, i + 0.4], [x["floor_gap"]] * 2, "r-", lw=2)
    ax.set_xticks(range(len(a)), [f"{x['arm']}\nlr {x['lr']:g}" for x in a], fontsize=7)
    ax.set_title(f"{lang} {obj}".strip(), fontsize=8)
  axes[0][0].set_ylabel("expected loss − H (nats); red: exact floor gap")
  figure.save(fig, out, "fig_planted_mix")


def draw(out) -> None:
  s = json.loads((out / "summary.json").read_text())
  if (out / CSV_KNEE).exists():
    _draw_knee(out, read_rows(out / CSV_KNEE), s)
  if (out / CSV_MIX).exists():
    _draw_mix(out, read_rows(out / CSV_MIX))
  if (out / fig8.CSV).exists() and read_rows(out / fig8.CSV):
    fig8.draw(out, read_rows(out / fig8.CSV))


def _knee_lines(out, s: dict) -> list[str]:
  yes = {True: "yes", False: "no"}
  fits = [r for n in (CSV_FLOOR, "planted_mix_floor.csv") if (out / n).exists()
          for r in read_rows(out / n)]
  bad = [int(r["rank"]) for r in fits if str(r["converged"]) != "True"]
  lines = [f"- Knee (smallest r with expected loss − H ≤ {s['tol']}): **{s['knee']}** "
           f"(k + 1 = {s['k'] + 1}; within ±1: {yes[s['knee_ok']]}); with sampled targets: "
           f"{s['knee_sampled']}.",
           f"- Every r ≥ k + 1 within {s['tol']} of H: {yes[s['high_ok']]} (largest gap "
           f"{fmt(s['high_max_gap'], spec='.4f')}).",
           f"- Every r ≤ k/2 above H by at least floor(r) − H − {s['margin']}: "
           f"{yes[s['low_ok']]} (smallest excess {fmt(s['low_min_excess'], spec='.4f')}).",
           f"- Floor fits: {len(fits) - len(bad)} of {len(fits)} converged."]
  if s["below_floor"]:
    lines.append(f"- **A trained head went below its exact floor at ranks {s['below_floor']}: "
                 "the floor fit did not find the minimum.**")
  return lines


def _mix_lines(rows) -> list[str]:
  if "lang" not in rows[0]:
    a = stats.arms(rows)
    table = [{k: x[k] for k in ("arm", "head", "rank", "head_params", "lr", "n", "mean",
                                "spread", "floor_gap")} for x in a]
    v, lrs = stats.verdict(rows), max(len(x["by_lr"]) for x in a)
    chosen = f"; each arm's lr chosen among {lrs} on these seeds" if lrs > 1 else ""
    return md_table(table, list(table[0])) + ([] if v is None else [
        "", f"- {v['mos_arm']} − H = {fmt(v['mos_gap'], spec='.4f')} (≤ {stats.MOS_TOL}: "
        f"{v['mos_within_tol']}); {v['lowrank_arm']} − H = {fmt(v['lowrank_gap'], spec='.4f')} "
        f"(floor gap {fmt(v['lowrank_floor_gap'], spec='.4f')}; at or above: "
        f"{v['lowrank_at_or_above_floor']}); margin {fmt(v['margin'], spec='.4f')}, seed spread "
        f"{fmt(v['spread'], spec='.4f')}, margin > 5 × spread: {v['margin_over_5_spread']} "
        f"({v['seeds']} seeds{chosen})."])
  return _cell_lines(rows)


def _cell_lines(rows) -> list[str]:
  """Each cell's arms (``below_floor``: runs whose gap lies below the lowrank arm's exact floor
  gap, of n) and its Welch lines; no verdict where an arm chose its lr on these seeds."""
  lines = []
  for (lang, obj), rs in stats.cells(rows):
    c = stats.cell_summary(rs)
    table = [{"cell": f"{lang}/{obj}", "run": run, **{k: a[k] for k in (
        "head", "rank", "head_params", "lr", "selected_on", "n", "mean", "floor_gap",
        "below_floor")}} for run, a in c["arms"].items()]
    lines += ["", *md_table(table, list(table[0]))]
    same = any(len(a["by_lr"]) > 1 for a in c["arms"].values())
    for key, run in (("params", "mos"), ("flops", "mos-flops")):
      if c[key] is not None:
        w = {**c[key], "verdict": stats.SAME_SEEDS} if same else c[key]
        what = f"{lang}/{obj}: lowrank − {run} gap"
        lines.append(f"- {welch_line(what, w, c['arms'][run]['n'], c['arms']['lowrank']['n'])}")
  return lines


def _speed_lines(out) -> list[str]:
  """Where the cells are shorter than the exact-floor test's runs: what they measure."""
  s = json.loads((out / META).read_text())["settings"]
  steps = s["mix"]["train.steps"] if "train.steps" in s["mix"] else s["steps"]
  test = PRESETS["cpu-e3"].knobs.mix["train.steps"]
  return [] if steps >= test else [
      "", f"- These cells ran {steps} steps, fewer than the {test} of the exact-floor test on "
      "fresh seeds (`--preset=cpu-e3`): they measure how fast each head trains, not what it "
      "can express. What it can express is tested by MoS − H against the lowrank arm's exact "
      f"floor gap (below_floor) at {test} steps, on fresh seeds."]


def _fresh_lines(out, s: dict) -> list[str]:
  rows = read_rows(out / CSV_FRESH)
  seeds = sorted({int(r["seed"]) for r in rows})
  lines = ["", f"Fresh seeds {seeds}, each arm at the lr it chose on the selection seeds:",
           *_cell_lines(rows)]
  d = s["fresh"]["decision"]
  return lines + ["", f"- Rule (pre-registered): {stats.rule_text(s['fresh']['rule'])}",
                  f"- Verdict: **{d['verdict']}**: {d['reason']}."]


def report(out, rel: str = ".") -> str:
  s, lines = json.loads((out / "summary.json").read_text()), []
  if (out / CSV_KNEE).exists():
    rows = read_rows(out / CSV_KNEE)
    lines += [f"![knee]({rel}/{figure.name('fig_planted_knee')})", "",
              *md_table(rows, list(rows[0])), "", *_knee_lines(out, s)]
  if (out / CSV_MIX).exists():
    rows = read_rows(out / CSV_MIX)
    lines += ["", f"![mixture]({rel}/{figure.name('fig_planted_mix')})", "", *_mix_lines(rows)]
    lines += _speed_lines(out) if "lang" in rows[0] else []
  if (out / CSV_FRESH).exists():
    lines += _fresh_lines(out, s)
  if (out / fig8.CSV).exists() and read_rows(out / fig8.CSV):
    rs = read_rows(out / fig8.CSV, text=("language", "kind", "head_run"))
    cols = ["language", "rank", "floor_gap", "trained_gap", "werror_raw", "werror_centred",
            "werror_weighted", "head_werror_raw", "head_werror_centred", "head_werror_weighted"]
    lines += ["", f"![Fig. 8]({rel}/{figure.name('fig_planted_fig8')})", "",
              *md_table(rs, cols)]
  return "\n".join(lines)


EXPERIMENT = Experiment("planted", PRESETS, plan, measure=measure_final, tables=tables, figures=draw,
                        report=report, reads_data=False, doc=__doc__)
