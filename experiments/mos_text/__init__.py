"""MoS on text (Yang et al. 2018): a mixture-of-softmaxes head against the dense head (matched
head FLOPs) and the lowrank head of matched head parameters, over init seeds.

Each arm is one population (its seeds are the members; one compile). Outputs in OUT:
``mos_text.csv`` (one row per run), ``summary.json`` (per arm the mean loss, and the two Welch
comparisons with their verdicts: supported when the interval of (other − MoS) lies above 0,
refuted below 0, undecided otherwise) and ``fig_mos_text``.
"""

from __future__ import annotations

import dataclasses

from sbjax import overrides
from sbjax.experiment import Experiment, Group
from sbjax.experiment import figure
from sbjax.heads import head_param_count
from sbjax.model import Model
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.head_flops import head_flops
from sbjax.studies.welch import welch

from ..common import md_table, read_rows, welch_line, write_json, write_rows
from .presets import PRESETS

CSV = "mos_text.csv"


def matched_rank(base, target: int) -> int:
  """The lowrank rank in 1..d whose head parameter count is closest to ``target`` (ties: the
  smaller rank)."""
  def count(r):
    return head_param_count(overrides.apply(base, {"model.head": "lowrank",
                                                   "model.head.rank": r}).model)
  return min(range(1, base.model.d_model + 1), key=lambda r: (abs(count(r) - target), r))


def arm_configs(p, data=None) -> list:
  """(arm, Config at seed 0) of every arm; a lowrank arm of rank 0 gets the mos arm's
  ``matched_rank``."""
  base = overrides.config_from(p.base, {**p.overrides, **corpus_overrides("text", data)})
  out, mos = [], None
  for arm, o in p.knobs.arms:
    o = dict(o)
    if o.get("model.head") == "lowrank" and int(o.get("model.head.rank", 0)) == 0:
      if mos is None:
        raise ValueError(f"mos_text preset: the matched lowrank arm {arm!r} needs a mos arm "
                         "before it")
      o["model.head.rank"] = matched_rank(base, head_param_count(mos.model))
    cfg = overrides.apply(base, {**o, "name": f"{base.name}-{arm}"})
    mos = cfg if cfg.model.head.kind == "mos" and mos is None else mos
    out.append((arm, cfg))
  return out


def plan(ctx):
  for arm, cfg in arm_configs(ctx.preset, ctx.data):
    seeds = ctx.knobs.seeds
    yield Group(arm, [dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=int(s)))
                      for s in seeds], labels=[{"arm": arm, "seed": int(s)} for s in seeds])


def tables(ctx) -> None:
  rows = []
  for r in (r for rs in ctx.results.values() for r in rs):
    c = ctx.groups[r["group"]].configs[r["member"]]
    rows.append({"arm": r["arm"], "head": c.model.head.kind, "seed": c.train.seed,
                 "lr": c.train.lr, "d_model": c.model.d_model, "vocab": c.model.vocab_size,
                 "rank": getattr(c.model.head, "rank", 0),
                 "n_mix": getattr(c.model.head, "n_mix", 0),
                 "head_params": head_param_count(c.model), "head_flops": head_flops(c.model),
                 "n_params": Model(c.model).param_count(), "steps": int(r["step"]),
                 "eval_loss": float(r["eval_loss"]), "eval_acc": float(r["eval_acc"])})
  write_rows(ctx.out / CSV, rows)
  write_json(ctx.out / "summary.json", summarize(rows))


def arms(rows) -> dict:
  """{arm: {head, head_params, head_flops, rank, n_mix, losses, n, mean}} in order."""
  out: dict = {}
  for r in rows:
    a = out.setdefault(str(r["arm"]), {k: r[k] for k in ("head", "head_params", "head_flops",
                                                           "rank", "n_mix")} | {"losses": []})
    a["losses"].append(float(r["eval_loss"]))
  for a in out.values():
    a.update(n=len(a["losses"]), mean=sum(a["losses"]) / len(a["losses"]))
  return out


def summarize(rows) -> dict:
  """Per arm the mean loss; ``params``: MoS against the matched lowrank arm, ``flops``: against
  the dense arm (Welch over seeds; diff > 0: MoS has the lower loss)."""
  a = arms(rows)
  vs = {k: welch(a["mos"]["losses"], a[o]["losses"]) if "mos" in a and o in a else None
        for k, o in (("params", "lowrank"), ("flops", "dense"))}
  return {"arms": a, **vs}


def draw(out) -> None:
  plt = figure.pyplot()
  a = arms(read_rows(out / CSV))
  fig, ax = plt.subplots(figsize=(5.0, 3.4))
  for i, x in enumerate(a.values()):
    ax.bar(i, x["mean"], color="C1" if x["head"] == "mos" else "C0", alpha=0.6)
    ax.plot([i] * x["n"], x["losses"], "k.", ms=5)
  ax.set_xticks(range(len(a)), [f"{n}\n{int(x['head_params'])} p\n{int(x['head_flops'])} F"
                                for n, x in a.items()], fontsize=7)
  lo, hi = (f(v for x in a.values() for v in x["losses"]) for f in (min, max))
  ax.set_ylim(lo - 0.1 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
  ax.set_ylabel("validation loss (nats/token)")
  figure.save(fig, out, "fig_mos_text", "text: MoS vs dense vs matched lowrank")


def report(out, rel: str = ".") -> str:
  rows = read_rows(out / CSV)
  a, s = arms(rows), summarize(rows)
  table = [{"arm": k, **{c: v[c] for c in ("head", "rank", "n_mix", "head_params", "head_flops",
                                             "n", "mean")}} for k, v in a.items()]
  lines = [f"![mos_text]({rel}/{figure.name('fig_mos_text')})", "",
           *md_table(table, list(table[0]))]
  for key, other in (("params", "lowrank"), ("flops", "dense")):
    if s[key] is not None:
      lines.append(f"- {welch_line(f'{other} − MoS', s[key], a['mos']['n'], a[other]['n'])}")
  return "\n".join(lines)


EXPERIMENT = Experiment("mos_text", PRESETS, plan, tables=tables, figures=draw, report=report,
                        doc=__doc__)
