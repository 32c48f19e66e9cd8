"""The planted experiment's report: the knee and its checks, the two figures and the markdown
section, read only from the CSV/JSON files that ``run`` wrote."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
import numpy as np  # noqa: E402

from . import fig8  # noqa: E402
from . import mos_cells_report  # noqa: E402
from .mix_stats import MOS_TOL, arms, verdict  # noqa: E402
from .mos_cells import cell_summary, cells  # noqa: E402
from ..shared import fmt, read_rows, save_figure, upath  # noqa: E402
from sbjax.studies.floor import knee  # noqa: E402

FIG_KNEE = "fig_planted_knee.png"
FIG_MIX = "fig_planted_mix.png"
CSV_KNEE = "planted.csv"
CSV_FLOOR = "planted_floor.csv"
CSV_MIX = "planted_mix.csv"
CSV_MIX_FLOOR = "planted_mix_floor.csv"
META = "planted_meta.json"
YES = {True: "yes", False: "no"}
OBJECTIVE_NAME = {"sampled": "sampled targets", "expected": "the Rao-Blackwellised loss"}


def _f(v) -> str:
  return fmt(v, spec=".4f")


def _mix_summary(out: Path):
  """``verdict`` of planted_mix.csv (the plain part 2), or the verdicts of each (language,
  objective) cell (``mos_cells``) when it has them; None without the file."""
  if not (out / CSV_MIX).exists():
    return None
  m = read_rows(out / CSV_MIX)
  if m and "lang" in m[0]:
    return {f"{lang}/{obj}": {k: (w["verdict"] if w else None)
                              for k, w in cell_summary(rs).items() if k != "arms"}
            for (lang, obj), rs in cells(m)}
  return verdict(m)


def summarize(out: Path) -> dict:
  """The knee and the three checks, computed from planted.csv and planted_meta.json (the
  mixture's summary alone when part 1 did not run)."""
  out = upath(out)
  if not (out / CSV_KNEE).exists():
    return {"knee": None, "mix": _mix_summary(out)}
  rows = read_rows(out / CSV_KNEE)
  meta = json.loads((out / META).read_text())
  s = meta["settings"]
  k, tol, margin = int(s["k"]), float(s["tol"]), float(s["margin"])
  h = rows[0]["H"]
  ranks = [int(r["rank"]) for r in rows]
  kn = knee(ranks, [r["expected_loss"] for r in rows], h, tol)
  kn_sampled = knee(ranks, [r["eval_loss"] for r in rows], h, tol)
  high = [r for r in rows if r["rank"] >= k + 1]
  low = [r for r in rows if r["rank"] <= k / 2]
  return {
      "k": k, "H": h, "tol": tol, "margin": margin, "knee": kn, "knee_sampled": kn_sampled,
      "knee_ok": kn is not None and abs(kn - (k + 1)) <= 1,
      "high_ok": bool(high) and all(r["gap"] <= tol for r in high),
      "high_max_gap": max((r["gap"] for r in high), default=float("nan")),
      "low_ok": bool(low) and all(r["gap"] >= r["floor_gap"] - margin for r in low),
      "low_min_excess": min((r["gap"] - r["floor_gap"] for r in low), default=float("nan")),
      "mix": _mix_summary(out),
  }


def _draw_knee(out: Path) -> None:
  rows = read_rows(out / CSV_KNEE)
  s = summarize(out)
  r = [x["rank"] for x in rows]
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  ax.plot(r, [x["expected_loss"] for x in rows], "o-", label="trained rank-r head")
  ax.plot(r, [x["eval_loss"] for x in rows], "x", color="C0", alpha=0.5,
          label="trained (sampled targets)")
  ax.plot(r, [x["floor"] for x in rows], "s--", color="C3", label="exact floor(r)")
  ax.axhline(s["H"], color="k", ls=":", label=f"H = {s['H']:.3f}")
  ax.axvline(s["k"] + 1, color="gray", ls=":", lw=0.8)
  if s["knee"] is not None:
    ax.axvline(s["knee"], color="C2", lw=1, label=f"knee r = {s['knee']}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("head rank r")
  ax.set_ylabel("validation loss (nats)")
  vocab = json.loads((out / META).read_text())["settings"]["vocab"]
  ax.set_title(f"planted V={vocab}, k={s['k']}")
  ax.legend(fontsize=8)
  fig.tight_layout()
  save_figure(fig, out / FIG_KNEE, dpi=110)
  plt.close(fig)


def _draw_mix(out: Path) -> None:
  m = read_rows(out / CSV_MIX)
  fig, ax = plt.subplots(figsize=(5.5, 3.5))
  x = np.arange(len(m))
  ax.bar(x, [v["gap"] for v in m], color=["C1" if v["head"] == "mos" else "C0" for v in m])
  for i, v in enumerate(m):
    if v["head"] == "lowrank" and math.isfinite(v["floor_gap"]):
      ax.plot([i - 0.4, i + 0.4], [v["floor_gap"]] * 2, "r-", lw=2)
  ax.set_xticks(x, [f"{v['label']}\n{int(v['head_params'])} p" for v in m])
  ax.set_ylabel("expected loss − H (nats)")
  ax.set_title("planted mixture: trained gap (bars), lowrank floor (red)")
  fig.tight_layout()
  save_figure(fig, out / FIG_MIX, dpi=110)
  plt.close(fig)


def draw(out: Path) -> None:
  """fig_planted_knee.png, fig_planted_mix.png when the mixture part ran, and the exact Fig. 8
  (planted_fig8.csv, fig_planted_fig8.png: ``fig8``) from the cached floors."""
  out = upath(out)
  if (out / CSV_KNEE).exists():
    _draw_knee(out)
  if (out / CSV_MIX).exists():
    m = read_rows(out / CSV_MIX)
    if m and "lang" in m[0]:
      mos_cells_report.draw(m, out / FIG_MIX)
    else:
      _draw_mix(out)
  fig8.write(out)


def _knee_text(out: Path, s: dict) -> str:
  kn = s["knee"]
  fits = [r for name in (CSV_FLOOR, CSV_MIX_FLOOR) if (out / name).exists()
          for r in read_rows(out / name)]
  bad = [int(r["rank"]) for r in fits if str(r["converged"]) != "True"]
  fit_txt = (f"The {len(fits)} floor fits (L-BFGS, float64, best of several starts) "
             + ("all converged" if not bad else f"did not all converge (ranks {bad})")
             + f": largest tangent-gradient norm {max(r['grad_norm'] for r in fits):.1e}"
             + (f"; largest spread across starts {max(float(r['spread']) for r in fits):.4f} "
                "nats." if fits and "spread" in fits[0] else "."))
  return (f"Knee (smallest r with loss − H ≤ {s['tol']}): **{kn if kn is not None else 'none'}**"
          f" (k + 1 = {s['k'] + 1}; within ±1: {YES[s['knee_ok']]}); with sampled targets: "
          f"{s['knee_sampled'] if s['knee_sampled'] is not None else 'none'}. "
          f"All r ≥ k + 1 within {s['tol']} of H: {YES[s['high_ok']]} (largest gap "
          f"{_f(s['high_max_gap'])}). All r ≤ k/2 above H by at least floor(r) − H − "
          f"{s['margin']}: {YES[s['low_ok']]} (smallest excess over the floor gap "
          f"{_f(s['low_min_excess'])}). {fit_txt}")


def below_floor_lines(rows, tol: float = 1e-4) -> list[str]:
  """A loud warning for every trained rank-limited head whose loss is below its exact floor:
  the floor is then not the minimum (a floor bug), not a result."""
  bad = [r for r in rows if math.isfinite(float(r["floor"]))
         and float(r["expected_loss"]) < float(r["floor"]) - tol]
  return ["", "**WARNING — FLOOR BUG: a trained head went below its reported exact floor "
          "(rank " + ", ".join(f"{int(r['rank'])}: loss {_f(r['expected_loss'])} < floor "
                              f"{_f(r['floor'])}" for r in bad)
          + "). The floor fit did not find the minimum; the floor comparisons are invalid.**"
          ] if bad else []


def _mix_lines(out: Path, rel: str) -> list[str]:
  m = read_rows(out / CSV_MIX)
  lines = ["", f"![mixture]({rel}/{FIG_MIX})", "",
           "| label | head | d_model | rank | n_mix | head_params | lr | expected_loss | floor | "
           "H | gap |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for v in m:
    lines.append(f"| {v['label']} | {v['head']} | {int(v['d_model'])} | {int(v['rank'])} | "
                 f"{int(v['n_mix'])} | {int(v['head_params'])} | {v.get('lr', '')} | "
                 f"{_f(v['expected_loss'])} | {_f(v['floor'])} | {_f(v['H'])} | {_f(v['gap'])} |")
  v = verdict(m)
  if v is not None:
    lines += ["", "Each arm at its best learning rate (the smallest mean gap over seeds; the "
              "mean gap at every lr of the grid in the last column):", "",
              "| arm | head | rank | head_params | lr | seeds | mean gap | seed spread | "
              "floor gap | mean gap by lr |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for a in arms(m):
      by = ", ".join(f"{lr:g}: {_f(g)}" for lr, g in a["by_lr"].items())
      lines.append(f"| {a['arm']} | {a['head']} | {a['rank']} | {a['head_params']} | "
                   f"{a['lr']:g} | {a['n']} | {_f(a['mean'])} | {_f(a['spread'])} | "
                   f"{_f(a['floor_gap'])} | {by} |")
    lines += ["", f"On the mixture (H = {_f(m[0]['H'])}), over {v['seeds']} seed(s): "
              f"{v['mos_arm']} − H = {_f(v['mos_gap'])} (≤ {MOS_TOL}: "
              f"{YES[v['mos_within_tol']]}); the best parameter-matched lowrank arm "
              f"{v['lowrank_arm']} − H = {_f(v['lowrank_gap'])} (its exact floor gap "
              f"{_f(v['lowrank_floor_gap'])}; at or above it: "
              f"{YES[v['lowrank_at_or_above_floor']]}). MoS beats lowrank: "
              f"{YES[v['mos_beats']]} by {_f(v['margin'])} nats; seed spread {_f(v['spread'])}; "
              f"margin > 5 × spread: {YES[v['margin_over_5_spread']]}."]
  return lines + below_floor_lines(m)


# The selection history of part 2's language (BUILD_NOTES.md, "Session 11"): head-alone Adam
# fits on the exact distributions of the guide's language (V 256, M 8, k 8, alpha 8), scratch
# runs that this report does not rerun. (label, head params, fit - H low, high, steps).
GUIDE = {"n_mix": 8, "rank": 8, "alpha": 8.0, "H": 2.7307}
GUIDE_FITS = (("the exact-size MoS (8 × 9)", 3664, 0.0463, 0.0470, 10_000),
              ("the best parameter-matched shape tried (16 × 6)", 3440, 0.0489, 0.0553, 3000))
CHOSEN = {"n_mix": 8, "rank": 4, "alpha": 8.0, "fit": (0.0120, 0.0122), "floor11_gap": 0.0418}


def _lang(m: dict) -> str:
  return f"M = {int(m['n_mix'])}, k = {int(m['rank'])}, α = {float(m['alpha']):g}"


def selection_text(mixture: dict | None, v: dict | None, tol: float = MOS_TOL) -> str:
  """The selection history of part 2's language and this run's result beside it: the
  guide's k = 8 fits (GUIDE_FITS, history), why k = 4 was chosen, and whether this run's
  MoS − H (planted_mix.csv, via ``verdict``) meets ``tol`` on its own language
  (planted_meta.json's ``mixture``). '' without a mixture part."""
  if not mixture or v is None:
    return ""
  fits = "; ".join(f"{name}, {n} head parameters: {lo:.4f}–{hi:.4f} after {steps:,} steps"
                   for name, n, lo, hi, steps in GUIDE_FITS)
  hist = (f"Selection history (BUILD_NOTES.md, session 11; head-alone fits on the exact "
          f"distributions, not rerun here): the guide's language ({_lang(GUIDE)}, H = "
          f"{GUIDE['H']}) came first; there MoS fits stop about 0.046 nats above H ({fits}), "
          f"above the {tol} criterion even without a trunk or sampling, so no "
          f"parameter-matched MoS met it at k = 8. The language was then changed to "
          f"{_lang(CHOSEN)} with a 16 × 5 head (fit − H {CHOSEN['fit'][0]:.4f}–"
          f"{CHOSEN['fit'][1]:.4f}), where the criterion is reachable and the matched low-rank "
          f"head's floor gap ({CHOSEN['floor11_gap']}) stays above it: a choice made after "
          "k = 8 failed, so a result at k = 4 says nothing about k = 8.")
  same = all(int(mixture.get(k, -1)) == int(GUIDE[k]) for k in ("n_mix", "rank")) and \
      mixture.get("kind") == "planted_mos"
  met = v["mos_within_tol"]
  gap = _f(v["mos_gap"])
  if same:
    now = (f"This run is at the guide's k = 8 ({_lang(mixture)}): MoS − H = {gap}, "
           + (f"within {tol}, unlike the history's fits." if met else
              f"not within {tol}, as in the history's fits."))
  else:
    now = (f"This run's language ({mixture.get('kind')}, {_lang(mixture)}): MoS − H = {gap}, "
           + (f"within {tol}." if met else f"not within {tol}."))
  return f"{hist} {now}"


def _cells_section(out: Path, rel: str) -> list[str]:
  """Part 2 in (language, objective) cells (``mos_cells_report``), with the selection history
  of the MoS language beside its Rao-Blackwellised cell (the objective of the history's 0.03
  criterion)."""
  m = read_rows(out / CSV_MIX)
  meta = json.loads((out / META).read_text())
  lines = ["## planted: MoS against the matched lowrank head, seeds and lrs (issue 33 item 5)",
           "", f"![mixture]({rel}/{FIG_MIX})", "", *mos_cells_report.table(m), "",
           *[x for p in mos_cells_report.paragraph(m, meta) for x in (p, "")]]
  mix = meta.get("mixture") or {}
  name = next((k for k, v in (meta.get("languages") or {}).items() if v == mix), None)
  cell = dict(cells(m)).get((name, "expected")) or dict(cells(m)).get((name, "sampled"))
  if cell:
    mos = cell_summary(cell)["arms"].get("mos")
    sel = selection_text(mix, {"mos_gap": mos["mean"], "mos_within_tol": mos["mean"] <= MOS_TOL}
                         ) if mos else ""
    obj = OBJECTIVE_NAME[str(cell[0]["objective"])]
    lines += [f"{sel} (This run's MoS − H: language {name}, trained on {obj}.)"] if sel else []
  return lines + below_floor_lines(m)


def report_section(out: Path, rel: str) -> str:
  out = upath(out)
  if not (out / CSV_KNEE).exists():
    return "\n".join(_cells_section(out, rel) + [""])
  rows = read_rows(out / CSV_KNEE)
  s = summarize(out)
  lines = ["## planted: the exact floor and the knee", "",
           f"Planted-rank language, k = {s['k']}, exact entropy H = {_f(s['H'])} nats; "
           "trained loss = the Rao-Blackwellised validation loss (expected_loss).", "",
           f"![loss vs head rank]({rel}/{FIG_KNEE})", "",
           "| rank | eval_loss | eval_acc | expected_loss | floor | H | gap | floor_gap |",
           "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append("| " + " | ".join([str(int(r["rank"]))] + [_f(r[c]) for c in (
        "eval_loss", "eval_acc", "expected_loss", "floor", "H", "gap", "floor_gap")]) + " |")
  lines += ["", _knee_text(out, s)]
  lines += below_floor_lines(rows)
  if (out / CSV_MIX).exists() and "lang" in read_rows(out / CSV_MIX)[0]:
    lines += ["", *_cells_section(out, rel)]
  elif (out / CSV_MIX).exists():
    lines += _mix_lines(out, rel)
    sel = selection_text(json.loads((out / META).read_text()).get("mixture"), s["mix"])
    lines += ["", sel] if sel else []
  lines += fig8.lines(out, rel, s["tol"])
  kn = s["knee"]
  agree = s["knee_ok"] and s["high_ok"] and s["low_ok"]
  lines += ["", "Godey et al. (2024) find that a head of rank below the data's needs costs loss "
            "(their E5 on real text shows a smooth decrease of loss with head rank); the planted "
            "language makes the needed rank known: the bottleneck must vanish at r = k + 1 (k "
            "planted dimensions plus the bias). sbjax finds the knee at r = "
            f"{kn if kn is not None else 'none'}, and the trained losses "
            + ("follow the exact floor: this agrees with the theory and with the paper's claim "
               "that the head rank, not the model, limits the loss."
               if agree else "do not meet every check above, so this run does not confirm it "
                             "(see the table)."), ""]
  return "\n".join(lines)
