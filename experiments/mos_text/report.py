"""mos_text's report, from mos_text.csv and mos_text_meta.json only: per arm the mean
validation loss over seeds (nats per token) with head parameters and head FLOPs per token, and
the generated paragraph: MoS against the parameter-matched lowrank head and against the dense
head (the arm at matched FLOPs), each supported / refuted / undecided by the Welch interval
over seeds (``sbjax.studies.welch``), with the scope."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from ..shared import fmt, read_rows, save_figure, upath, welch_clause  # noqa: E402
from sbjax.studies.welch import welch  # noqa: E402

CSV = "mos_text.csv"
META = "mos_text_meta.json"
FIG = "fig_mos_text.png"


def _f(v) -> str:
  return fmt(v, spec=".4f")


def arms(rows) -> dict:
  """{arm: {head, head_params, head_flops, rank, n_mix, losses, n, mean, spread}} in order."""
  out: dict = {}
  for r in rows:
    a = out.setdefault(str(r["arm"]), {"head": r["head"], "head_params": int(r["head_params"]),
                                       "head_flops": int(r["head_flops"]),
                                       "rank": int(r["rank"]), "n_mix": int(r["n_mix"]),
                                       "losses": []})
    a["losses"].append(float(r["eval_loss"]))
  for a in out.values():
    a["n"] = len(a["losses"])
    a["mean"] = sum(a["losses"]) / a["n"]
    a["spread"] = max(a["losses"]) - min(a["losses"])
  return out


def comparisons(rows) -> dict:
  """``params``: mos against the matched lowrank arm; ``flops``: mos against the dense arm
  (``welch`` of the seeds' losses; diff > 0: MoS has the lower loss). None when missing."""
  a = arms(rows)
  mos = a.get("mos")

  def vs(other):
    return None if mos is None or other not in a else welch(mos["losses"], a[other]["losses"])
  return {"params": vs("lowrank"), "flops": vs("dense")}


def _cmp(what: str, mos: dict, other: dict, w: dict | None) -> str:
  if w is None:
    return ""
  return (f"against {what} ({other['head_params']} head parameters, {other['head_flops']} "
          f"FLOPs/token; loss {_f(other['mean'])}) its loss − MoS's = "
          f"{welch_clause(w, mos['n'], other['n'])}")


def paragraph(rows, meta: dict) -> str:
  """The claim, the two comparisons with their verdicts, and the scope and choices."""
  a, c = arms(rows), comparisons(rows)
  mos = a.get("mos")
  if mos is None:
    return "No MoS arm ran: nothing is claimed."
  low = a.get("lowrank")
  parts = [_cmp(f"the parameter-matched lowrank head (r = {low['rank']})", mos, low,
                c["params"]) if low else "",
           _cmp("the dense head (matched FLOPs)", mos, a["dense"], c["flops"])
           if "dense" in a else ""]
  s, d = meta.get("settings", {}), meta.get("data", {})
  return (f"Claim tested (Yang et al. 2018): a MoS head beats a softmax head of equal head "
          f"parameters on text. MoS ({mos['n_mix']} components; {mos['head_params']} head "
          f"parameters, {mos['head_flops']} FLOPs/token) reaches a validation loss of "
          f"{_f(mos['mean'])} nats/token; " + "; ".join(p for p in parts if p) + ". "
          f"Scope and choices: one corpus ({Path(str(meta.get('corpus', '?'))).name}, "
          f"sentencepiece V = {d.get('vocab_size', '?')}), a {s.get('n_layers', '?')}-layer "
          f"trunk of d = {int(rows[0]['d_model'])}, {s.get('steps', '?')} steps at batch "
          f"{s.get('batch', '?')} × {s.get('seq_len', '?')}, one lr ({s.get('lr', '?')}) for "
          "every arm (not tuned per arm), init seeds "
          f"{', '.join(str(x) for x in meta.get('seeds', ()))}, every arm from the same data "
          "order; head FLOPs count the forward matmuls (sbjax.studies.head_flops), not the "
          "softmaxes' exponentials. The interval covers the seeds' variation only: every arm "
          f"is scored on the same {s.get('eval_batches', '?')} validation batches, whose own "
          "sampling error is not in it. A verdict holds at this size and budget only; "
          "undecided means the interval covers 0.")


def draw(out: Path) -> None:
  """fig_mos_text.png: each arm's loss per seed (dots) and mean (bar)."""
  out = upath(out)
  a = arms(read_rows(out / CSV))
  fig, ax = plt.subplots(figsize=(5.0, 3.4))
  for i, (name, x) in enumerate(a.items()):
    ax.bar(i, x["mean"], color="C1" if x["head"] == "mos" else "C0", alpha=0.6)
    ax.plot([i] * x["n"], x["losses"], "k.", ms=5)
  ax.set_xticks(range(len(a)), [f"{n}\n{x['head_params']} p\n{x['head_flops']} F"
                                for n, x in a.items()], fontsize=7)
  lo = min(min(x["losses"]) for x in a.values())
  hi = max(max(x["losses"]) for x in a.values())
  ax.set_ylim(lo - 0.1 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
  ax.set_ylabel("validation loss (nats/token)")
  ax.set_title("text: MoS vs dense vs matched lowrank")
  fig.tight_layout()
  save_figure(fig, out / FIG, dpi=100)
  plt.close(fig)


def report_section(out: Path, rel: str) -> str:
  out = upath(out)
  rows = read_rows(out / CSV)
  meta = json.loads((out / META).read_text())
  lines = ["## mos_text: MoS on text against dense and the parameter-matched lowrank head", "",
           f"![mos_text]({rel}/{FIG})", "",
           "| arm | head | rank | n_mix | head params | head FLOPs/token | seeds | mean loss | "
           "seed spread | losses |", "|---|---|---|---|---|---|---|---|---|---|"]
  for name, a in arms(rows).items():
    lines.append(f"| {name} | {a['head']} | {a['rank']} | {a['n_mix']} | {a['head_params']} | "
                 f"{a['head_flops']} | {a['n']} | {_f(a['mean'])} | {_f(a['spread'])} | "
                 + ", ".join(_f(x) for x in a["losses"]) + " |")
  return "\n".join(lines + ["", paragraph(rows, meta), ""])
