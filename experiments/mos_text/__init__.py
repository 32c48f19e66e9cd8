"""MoS on text (Yang et al. 2018): a mixture-of-softmaxes head against the dense head (matched
head FLOPs) and the lowrank head of matched head parameters, over init seeds.

Each arm is one population (its seeds x the preset's lrs). With an lr grid, each arm is
reported at the lr of its smallest mean loss on the held-out tail of the training split
(``held_out``; ``sel_loss``), not on the validation stream that reports it. Outputs in OUT:
``mos_text.csv`` (one row per run), ``summary.json`` (per arm its lr and mean loss, the two
Welch comparisons, ``sbjax.studies.welch``, and the pre-registered ``decision``,
``presets.Rule``) and ``fig_mos_text``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import jax

from sbjax import overrides
from sbjax.data.dataset import Dataset
from sbjax.experiment import Experiment, Group
from sbjax.experiment import figure
from sbjax.heads import head_param_count
from sbjax.model import Model
from sbjax.studies.corpus import corpus_overrides
from sbjax.studies.head_flops import head_flops
from sbjax.studies.welch import welch
from sbjax.train.step import evaluate, make_eval_step

from ..common import (best_lr, matched_rank, md_table, mean, read_rows, welch_line, write_json,
                     write_rows)
from .presets import PRESETS

CSV = "mos_text.csv"


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
      o["model.head.rank"] = matched_rank(overrides.apply(base, {**o, "model.head.rank": 1}),
                                          head_param_count(mos.model))
    cfg = overrides.apply(base, {**o, "name": f"{base.name}-{arm}"})
    mos = cfg if cfg.model.head.kind == "mos" and mos is None else mos
    out.append((arm, cfg))
  return out


def held_out(ctx, cfg) -> tuple:
  """(the training split without its last ``select_fraction`` of tokens, cut at a window
  boundary; a Dataset whose validation split is that tail) of ``cfg``'s corpus."""
  ds = ctx.dataset(cfg)
  n = len(ds.train_tokens)
  cut = n - int(round(ctx.knobs.select_fraction * n)) // ds.seq_len * ds.seq_len
  kw = {"seq_len": ds.seq_len, "global_batch_size": ds.global_batch_size, "seed": ds.seed,
        "vocab_size": ds.vocab_size, "name": ds.name, "source": ds.source,
        "tokenizer_path": ds.tokenizer_path}
  return (Dataset(ds.train_tokens[:cut], ds.val_tokens, extra_info={"held_out_tokens": n - cut},
                  **kw), Dataset(ds.train_tokens[cut:], ds.train_tokens[cut:], **kw))


def plan(ctx):
  k = ctx.knobs
  members = [(lr, int(s)) for lr in k.lrs or (None,) for s in k.seeds]
  for arm, cfg in arm_configs(ctx.preset, ctx.data):
    yield Group(arm, [dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, seed=s, lr=cfg.train.lr if lr is None else float(lr))) for lr, s in members],
        labels=[{"arm": arm, "seed": s} for _, s in members],
        dataset=held_out(ctx, cfg)[0] if k.select_fraction else None)


@functools.lru_cache(maxsize=8)
def _eval_fn(model_cfg):
  return jax.jit(make_eval_step(Model(model_cfg)))


def measure(ctx, group, j, steps, params) -> list:
  """The final checkpoint's loss and accuracy on the held-out tail (sel_loss, sel_acc); nothing
  without one."""
  k, cfg = ctx.knobs, group.configs[j]
  if not k.select_fraction:
    return [{}]
  r = evaluate(_eval_fn(cfg.model), params[0], held_out(ctx, cfg)[1].eval_batches(
      k.select_batches))
  return [{"sel_loss": r["eval_loss"], "sel_acc": r["eval_acc"]}]


def tables(ctx) -> None:
  sel = {(m["group"], m["member"]): m for ms in ctx.measured.values() for m in ms}
  rows = []
  for r in (r for rs in ctx.results.values() for r in rs):
    c = ctx.groups[r["group"]].configs[r["member"]]
    m = sel.get((r["group"], r["member"]), {})
    rows.append({"arm": r["arm"], "head": c.model.head.kind, "seed": c.train.seed,
                 "lr": c.train.lr, "d_model": c.model.d_model, "vocab": c.model.vocab_size,
                 "rank": getattr(c.model.head, "rank", 0),
                 "n_mix": getattr(c.model.head, "n_mix", 0),
                 "head_params": head_param_count(c.model), "head_flops": head_flops(c.model),
                 "n_params": Model(c.model).param_count(), "steps": int(r["step"]),
                 "eval_loss": float(r["eval_loss"]), "eval_acc": float(r["eval_acc"]),
                 **{k: float(m[k]) for k in ("sel_loss", "sel_acc") if k in m}})
  write_rows(ctx.out / CSV, rows)
  write_json(ctx.out / "summary.json", summarize(rows, ctx.knobs.rule))


def arms(rows) -> dict:
  """{arm: {head, head_params, head_flops, rank, n_mix, lr, losses, n, mean, selected_on,
  by_lr}} in order, each arm at its chosen lr: the smallest mean ``sel_loss`` (the held-out
  tail; ties: the first lr; a non-finite mean never wins), or ``eval_loss`` without it;
  ``by_lr``: {lr: {n, sel_mean, mean}} (selection and validation means)."""
  on = "held_out" if rows and "sel_loss" in rows[0] else "validation"
  by: dict = {}
  for r in rows:
    a = by.setdefault(str(r["arm"]), {k: r[k] for k in ("head", "head_params", "head_flops",
                                                          "rank", "n_mix")} | {"by_lr": {}})
    x = a["by_lr"].setdefault(float(r["lr"]), {"losses": [], "sel": []})
    x["losses"].append(float(r["eval_loss"]))
    x["sel"].append(float(r["sel_loss" if on == "held_out" else "eval_loss"]))
  for a in by.values():
    grid = {lr: {"n": len(x["losses"]), "sel_mean": mean(x["sel"]), "mean": mean(x["losses"]),
                 "losses": x["losses"]} for lr, x in a["by_lr"].items()}
    lr = best_lr({v: g["sel_mean"] for v, g in grid.items()})
    a.update(lr=lr, losses=grid[lr]["losses"], n=grid[lr]["n"], mean=grid[lr]["mean"],
             selected_on=on, by_lr={v: {k: g[k] for k in ("n", "sel_mean", "mean")}
                                     for v, g in grid.items()})
  return by


def summarize(rows, rule=None) -> dict:
  """Per arm its lr and mean loss; ``params``: MoS against the matched lowrank arm, ``flops``:
  against the dense arm (Welch over seeds; diff > 0: MoS has the lower loss); ``decision``:
  ``rule``'s (``decide``), None without one."""
  a = arms(rows)
  vs = {k: welch(a["mos"]["losses"], a[o]["losses"]) if "mos" in a and o in a else None
        for k, o in (("params", "lowrank"), ("flops", "dense"))}
  return {"arms": a, **vs, "rule": None if rule is None else dataclasses.asdict(rule),
          "decision": None if rule is None else decide(rule, a)}


def decide(rule, a: dict) -> dict:
  """``rule`` (``presets.Rule``) on the arms ``a`` (``arms``): its verdict and reason."""
  hi_arm, lo_arm = rule.primary
  if hi_arm not in a or lo_arm not in a:
    return {"verdict": "undecided", "reason": f"no {hi_arm} or no {lo_arm} arm"}
  w = welch(a[lo_arm]["losses"], a[hi_arm]["losses"], level=rule.level)
  side = ("fewer than 2 seeds on a side" if math.isnan(w["lo"]) else "above 0" if w["lo"] > 0
          else "below 0" if w["hi"] < 0 else "covering 0")
  v = {"supported": "reproduces", "refuted": "refutes"}.get(w["verdict"], "undecided")
  return {**w, "verdict": v, "reason": (
      f"{hi_arm} − {lo_arm} = {w['diff']:.4f} nats, {rule.level:.0%} Welch CI "
      f"[{w['lo']:.4f}, {w['hi']:.4f}] over {a[lo_arm]['n']} + {a[hi_arm]['n']} seeds, "
      f"{side}")}


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


def rule_text(rule: dict) -> str:
  """The rule (``presets.Rule`` as a dict) in words, for the report."""
  (a, b), (c, d) = rule["primary"], rule["beside"]
  return (f"each arm at the lr of its smallest mean held-out loss; the {rule['level']:.0%} "
          f"Welch interval of {a} − {b} validation loss over seeds above 0 reproduces the "
          f"matched-parameter claim, below 0 refutes it, else undecided; {c} − {d} (equal head "
          "FLOPs) is reported beside it.")


def report(out, rel: str = ".") -> str:
  rows = read_rows(out / CSV)
  a, s = arms(rows), json.loads((out / "summary.json").read_text())
  table = [{"arm": k, **{c: v[c] for c in ("head", "rank", "n_mix", "head_params", "head_flops",
                                             "lr", "n", "mean")}} for k, v in a.items()]
  lines = [f"![mos_text]({rel}/{figure.name('fig_mos_text')})", "",
           *md_table(table, list(table[0]))]
  grid = [{"arm": k, "lr": lr, "n": g["n"], "held_out_mean": g["sel_mean"], "val_mean": g["mean"],
           "chosen": str(lr == v["lr"])} for k, v in a.items() for lr, g in v["by_lr"].items()]
  if len(grid) > len(a):  # an lr grid: each arm at each lr (held_out_mean chose the lr)
    lines += ["", *md_table(grid, list(grid[0]))]
  lines.append("")
  for key, other in (("params", "lowrank"), ("flops", "dense")):
    if s[key] is not None:
      lines.append(f"- {welch_line(f'{other} − MoS', s[key], a['mos']['n'], a[other]['n'])}")
  if s.get("decision") is not None:
    d = s["decision"]
    lines += [f"- Rule (pre-registered): {rule_text(s['rule'])}",
              f"- Verdict: **{d['verdict']}**: {d['reason']}."]
  return "\n".join(lines)


EXPERIMENT = Experiment("mos_text", PRESETS, plan, measure=measure, tables=tables, figures=draw,
                        report=report, doc=__doc__)
