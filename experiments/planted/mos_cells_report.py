"""The report of part 2 in (language, objective) cells (``mos_cells``): one table of the arms
of every cell (head parameters, head FLOPs per token, the lr chosen on the selection stream,
the mean gap to H on the reported stream with its seed spread) and one generated paragraph per
language: MoS against the parameter-matched lowrank head and at matched FLOPs, with sampled
targets (the headline) and the Rao-Blackwellised loss beside it, each supported / refuted /
undecided by the Welch interval over seeds, and the scope. From planted_mix.csv and
planted_meta.json only."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from .mos_cells import cell_summary, cells  # noqa: E402
from ..shared import fmt, save_figure, welch_clause  # noqa: E402

OBJECTIVE = {"sampled": "sampled targets", "expected": "the Rao-Blackwellised loss"}


def _f(v) -> str:
  return fmt(v, spec=".4f")


def table(rows) -> list[str]:
  """The arms of every cell at their selected lr."""
  out = ["| language | objective | arm | head | head params | head FLOPs/token | lr (chosen on "
         "the selection stream) | selection gap by lr | seeds | mean gap (reported) | seed "
         "spread | floor gap |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for (lang, obj), rs in cells(rows):
    for run, a in cell_summary(rs)["arms"].items():
      by = ", ".join(f"{lr:g}: {_f(g)}" for lr, g in a["sel_by_lr"].items())
      out.append(f"| {lang} | {obj} | {run} | {a['head']} | {a['head_params']} | "
                 f"{a['head_flops']} | {a['lr']:g} | {by} | {a['n']} | {_f(a['mean'])} | "
                 f"{_f(a['spread'])} | {_f(a['floor_gap'])} |")
  return out


def _cmp(name: str, a: dict, low: dict, w: dict | None) -> str:
  """One comparison's sentence: the two gaps, the difference, the CI and the verdict."""
  if w is None:
    return ""
  return (f"{name} ({a['head_params']} head parameters, {a['head_flops']} FLOPs/token) − H = "
          f"{_f(a['mean'])} against lowrank r = {low['rank']} ({low['head_params']}, "
          f"{low['head_flops']}) − H = {_f(low['mean'])}: lowrank − MoS = "
          f"{welch_clause(w, a['n'], low['n'])}")


def _budget_text(s: dict, lrs: tuple) -> str:
  """Where the cell's numbers stop: arms whose chosen lr is an end of the grid (a wider grid
  might move them), and the matched lowrank head's distance from its exact floor gap."""
  out = []
  edge = [f"{run} ({a['lr']:g})" for run, a in s["arms"].items()
          if len(lrs) > 1 and a["lr"] in (min(lrs), max(lrs))]
  if edge:
    out.append("chosen lr at an end of the grid: " + ", ".join(edge)
               + " (a wider grid might lower these arms)")
  low = s["arms"].get("lowrank")
  if low is not None and low["floor_gap"] == low["floor_gap"]:
    out.append(f"the matched lowrank head ends {_f(low['mean'] - low['floor_gap'])} nats above "
               f"its exact floor gap ({_f(low['floor_gap'])}), so these runs "
               + ("stop short of the heads' limits: the comparison is of what each head reaches "
                  "in this budget" if low["mean"] - low["floor_gap"] > low["spread"] else
                  "reach that head's limit within its seed spread"))
  return ("; ".join(out) + ".") if out else ""


def _objective_text(obj: str, s: dict, lrs: tuple = ()) -> str:
  low = s["arms"].get("lowrank")
  if low is None:
    return ""
  parts = [_cmp("MoS", s["arms"]["mos"], low, s["params"]) if s["params"] else "",
           _cmp("MoS at the lowrank head's FLOPs", s["arms"]["mos-flops"], low, s["flops"])
           if s["flops"] else ""]
  budget = _budget_text(s, lrs)
  return (f"With {OBJECTIVE.get(obj, obj)}: " + "; ".join(p for p in parts if p) + "."
          + (f" {budget[0].upper()}{budget[1:]}" if budget else ""))


def _lang_text(lang: str, info: dict | None, by_obj: dict, lrs: tuple = ()) -> str:
  kind = (info or {}).get("kind", "?")
  h = (info or {}).get("entropy_nats", float("nan"))
  what = (f"{kind}, V = {(info or {}).get('vocab', '?')}, k = {(info or {}).get('rank', '?')}"
          + (f", M = {info['n_mix']}" if info and "n_mix" in info else "") + f", H = {_f(h)}")
  premise = ("its log-probability matrix has rank k + 1, which the matched lowrank head "
             "represents exactly, so the claim's premise (a high-rank target) does not hold "
             "here and MoS is not expected to win" if kind == "planted" else
             "its centred log-probability matrix has rank ≈ V − 1, which the MoS head with "
             "e = k + 1 represents exactly and no lowrank head of rank ≤ d does")
  order = [o for o in ("sampled", "expected") if o in by_obj] + \
      [o for o in by_obj if o not in ("sampled", "expected")]
  body = " ".join(_objective_text(o, by_obj[o], lrs) for o in order)
  return (f"**Language {lang}** ({what}; {premise}). Claim tested (Yang et al. 2018): a MoS "
          f"head beats a softmax head of equal head parameters. {body}")


def paragraph(rows, meta: dict) -> list[str]:
  """The generated paragraphs: one per language, the headline (sampled targets) first, and
  the scope and the choices."""
  s = meta.get("settings", {})
  langs = meta.get("languages") or {}
  by_lang: dict = {}
  for (lang, obj), rs in cells(rows):
    by_lang.setdefault(lang, {})[obj] = cell_summary(rs)
  grid = tuple(float(x) for x in s.get("mix_lrs", ()))
  lines = [_lang_text(lang, langs.get(lang), objs, grid) for lang, objs in by_lang.items()]
  seeds = ", ".join(str(x) for x in s.get("mix_seeds", ()))
  lrs = ", ".join(f"{x:g}" for x in s.get("mix_lrs", ()))
  steps = (s.get("mix") or {}).get("train.steps", "?")
  batch = (s.get("mix") or {}).get("train.batch_size", s.get("batch", "?"))
  scope = (f"Scope and choices: planted languages of context 1 only (no text here), a "
           f"{s.get('n_layers', '?')}-layer trunk of d = 16, {steps} steps at batch {batch} × "
           f"{s.get('seq_len', '?')}; init seeds {seeds} and lrs {lrs}, all trained as one "
           "population per arm; each arm's lr is the one of the smallest mean gap on the "
           f"selection stream ({s.get('select_batches', '?')} batches of an independent sample "
           "of the language, not the reported stream), and the gaps above are those of the "
           f"reported validation stream ({s.get('measure_batches', '?')} batches) at that lr. "
           "The gap is the Rao-Blackwellised validation loss − H (the mean KL to the "
           "language) whatever the training objective. Head FLOPs count the forward matmuls "
           "(sbjax.studies.head_flops), not the softmaxes' exponentials (MoS: M × V per token). "
           "The interval covers the seeds' variation only: every arm is measured on the same "
           "reported batches, whose own sampling error (rare contexts carry much of the mean "
           "KL) is not in it. A verdict holds for this size and budget only; undecided means "
           "the interval covers 0.")
  return lines + [scope]


def draw(rows, path) -> None:
  """One panel per cell: each arm's reported gap per seed (dots) and its mean (bar) at the
  selected lr, the lowrank arm's exact floor gap as a red line."""
  cs = cells(rows)
  fig, axes = plt.subplots(1, len(cs), figsize=(3.2 * len(cs), 3.4), squeeze=False)
  for ax, ((lang, obj), rs) in zip(axes[0], cs):
    by = cell_summary(rs)["arms"]
    for i, (run, a) in enumerate(by.items()):
      ax.bar(i, a["mean"], color="C1" if a["head"] == "mos" else "C0", alpha=0.6)
      ax.plot([i] * a["n"], a["gaps"], "k.", ms=4)
      if a["floor_gap"] == a["floor_gap"]:  # not nan: a lowrank arm's exact floor
        ax.plot([i - 0.4, i + 0.4], [a["floor_gap"]] * 2, "r-", lw=2)
    ax.set_xticks(range(len(by)), [f"{run}\nlr {a['lr']:g}" for run, a in by.items()],
                  fontsize=7)
    ax.set_title(f"{lang}, {OBJECTIVE.get(obj, obj)}", fontsize=8)
  axes[0][0].set_ylabel("expected loss − H (nats), reported stream")
  fig.tight_layout()
  save_figure(fig, path, dpi=100)
  plt.close(fig)
