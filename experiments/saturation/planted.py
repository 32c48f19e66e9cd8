"""The planted arms (``saturation_planted``): arms of width d and weight decay λ
(``planted_presets``) trained on fresh tokens of a planted mixture language, every checkpoint
measured on fixed validation windows (``planted_measure``), each arm read out against its rank
floor floor(d). Outputs in OUT: ``planted_checkpoints.csv``, ``planted_arms.csv`` (per arm),
``planted_floor<tag>.csv`` (per language), ``planted_meta.json``, ``summary.json`` (per arm its
verdicts; per replicated arm its seed spread; ``rule``: the width-order rule's verdict,
``rise_rule``, over the float32 arms of the preset's language) and the figures ``FIGS``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
from scipy import stats

from sbjax import checkpoint as ckpt
from sbjax.analysis.samples import eval_sample
from sbjax.data import make_dataset
from sbjax.data.planted_tail import rarest_token
from sbjax.experiment import Experiment, Group
from sbjax.experiment import figure
from sbjax.train import read_metrics

from . import planted_measure as pm
from ..common import fmt, md_table, read_rows, write_json, write_rows
from .planted_presets import PRESETS, arm_config, arm_name, lang_tag
from .rise_rule import RiseRule, decide, rule_text

FIGS = ("fig_planted_loss_gamma", "fig_planted_kl_anisotropy_gamma")


def groups(k) -> list[tuple[str, list]]:
  """[(name, arms)]: each arm alone, or with ``population`` the arms of one shape together."""
  if not k.population:
    return [(a.name, [a]) for a in k.arms]
  out: dict = {}
  for a in k.arms:
    out.setdefault(arm_name(a.d, 0.0, a.dtype, 0, a.lang).replace("-wd0", ""), []).append(a)
  return list(out.items())


def plan(ctx):
  p, built = ctx.preset, {}
  gs = [(n, arms, [arm_config(p, a) for a in arms]) for n, arms in groups(p.knobs)]
  for name, arms, cfgs in gs:  # every Config validated before any training
    dss = []
    for a, c in zip(arms, cfgs):
      if (a.lang, a.seed) not in built:
        built[a.lang, a.seed] = make_dataset(c.data, seq_len=c.train.seq_len,
                                             global_batch_size=c.train.batch_size, seed=a.seed,
                                             workdir=None, process_index=0, process_count=1)
      dss.append(built[a.lang, a.seed])
    labels = [{"arm": a.name, "d": a.d, "weight_decay": a.weight_decay, "dtype": a.dtype,
               "seed": a.seed} for a in arms]
    yield Group(name, cfgs, labels, dss[0] if len({a.seed for a in arms}) == 1 else dss)


def _ds(group: Group, j: int):
  return group.dataset[j] if isinstance(group.dataset, list) else group.dataset


def measure(ctx, group, j, steps, params):
  ds = _ds(group, j)
  one = pm.measurer(ckpt.load_config(ctx.workdirs(group)[j]),
                    eval_sample(ds, ctx.knobs.val_windows), ds.planted)
  return [one(s, p) for s, p in zip(steps, params)]


def _floors(ctx, k, members) -> dict:
  """{language: {d: floor row}}, each language's floors kept as a memo and in its CSV."""
  out = {}
  for lang in dict.fromkeys(a.lang for a in k.arms):
    g, j = next(m for a, m in members.items() if a.lang == lang)
    planted, ranks = _ds(g, j).planted, sorted({a.d for a in k.arms if a.lang == lang})
    rows = ctx.memo(f"planted_floor{lang_tag(lang)}", [planted.info(), ranks, k.floor_gtol,
                                                       k.floor_max_iter, k.floor_mode],
                    lambda: pm.floors(planted, ranks, k))
    write_rows(ctx.out / f"planted_floor{lang_tag(lang)}.csv", rows)
    out[lang] = {int(r["rank"]): r for r in rows}
  return out


def tables(ctx) -> None:
  k, out = ctx.knobs, ctx.out
  points = [r for rows in ctx.measured.values() for r in rows]
  by_name = {lab["arm"]: (g, j) for g in ctx.groups.values() for j, lab in enumerate(g.labels)}
  members = {a: by_name[a.name] for a in k.arms}
  floors, arms, ck, ruled = _floors(ctx, k, members), [], [], []
  for a, (g, j) in members.items():
    rows = [r for r in points if r["arm"] == a.name]
    if not rows:  # every checkpoint set aside
      continue
    cfg, lang, fl = g.configs[j], _ds(g, j).planted, floors[a.lang][a.d]
    train = [r for r in read_metrics(ctx.workdirs(g)[j]) if "loss" in r]
    aside = ctx.set_aside.get(f"{g.name}/{j}", [])
    arms.append({"arm": a.name, **pm.arm_summary(rows, train, cfg, k, fl["floor"], fl["H"]),
                 "seed": a.seed, "vocab": lang.vocab, "zipf": lang.zipf,
                 "checkpoints_used": len(rows),
                 "checkpoints_saved": len(ckpt.checkpoint_steps(cfg.train)),
                 "last_step": rows[-1]["step"], "set_aside": "; ".join(
                     f"step {r['step']} ({r['reason']})" for r in aside) or "none"})
    ruled += arms[-1:] if not a.lang and a.dtype == "float32" else []  # the rule's arms
    ck += [{c: v for c, v in r.items() if c not in ("group", "member")
            and not c.startswith(pm.WINDOW)} for r in rows]
  write_rows(out / "planted_checkpoints.csv", ck)
  write_rows(out / "planted_arms.csv", arms)
  write_json(out / "planted_meta.json", _meta(ctx, members))
  write_json(out / "summary.json", {
      "arms": {r["arm"]: {c: r[c] for c in ("rise_verdict", "rise_above_null")} for r in arms},
      "replicates": replicates(arms),
      "rule": decide(ruled, k.rule, k.ref_weight_decay) if ruled else None})


def _meta(ctx, members) -> dict:
  k = ctx.knobs
  g, j = members[k.arms[0]]
  lang, t = _ds(g, j).planted, g.configs[j].train
  tokens = t.steps * t.batch_size * t.seq_len
  return {"preset": ctx.preset_name, "tokens_per_arm": tokens, "steps": t.steps, "knobs": {
      **dataclasses.asdict(k), "steps": t.steps, "lr": t.lr, "batch": t.batch_size,
      "seq_len": t.seq_len, "n_layers": g.configs[j].model.n_layers, "ckpt_every": t.ckpt_every,
      "log_every": t.log_every, "vocab": g.configs[j].model.vocab_size},
      "language": lang.info(), "rarest_token": rarest_token(lang, tokens),
      "languages": {lang_tag(a.lang): _ds(*members[a]).planted.info() for a in k.arms}}


def replicates(arms: list[dict]) -> list[dict]:
  """Per arm trained from several seeds (same language, d, λ, dtype): the seed bounds (``min``,
  ``max`` of the rises), ``n_above`` (seeds above their null level), the mean rise, its SD over
  seeds and the t interval mean ± t_{0.975, n−1} SD / √n (the variance between trained runs),
  and ``half``: the mean half-width of the seeds' bootstrap CIs (evaluation noise)."""
  by: dict = {}
  for a in arms:
    by.setdefault((a["vocab"], a["zipf"], a["d"], a["weight_decay"], a["dtype"]), []).append(a)
  out = []
  for (vocab, zipf, d, lam, dtype), rows in by.items():
    r, n = np.array([a["rise"] for a in rows]), len(rows)
    if n < 2:
      continue
    sd = float(np.std(r, ddof=1))
    t = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    out.append({"vocab": vocab, "zipf": zipf, "d": d, "weight_decay": lam, "dtype": dtype,
                "seeds": [int(a["seed"]) for a in rows], "n": n, "min": float(r.min()),
                "max": float(r.max()), "n_above": sum(int(a["rise_above_null"]) for a in rows),
                "mean": float(r.mean()),
                "sd": sd, "t_lo": float(r.mean()) - t, "t_hi": float(r.mean()) + t,
                "half": float(np.mean([(a["rise_ci_hi"] - a["rise_ci_lo"]) / 2
                                       for a in rows]))})
  return out


def draw(out) -> None:
  """Expected loss vs Γ with each arm's floor; the head's KL(σ‖u) and anisotropy vs Γ."""
  arms = read_rows(out / "planted_arms.csv")
  ck = read_rows(out / "planted_checkpoints.csv")
  plt = figure.pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  fig2, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
  for i, a in enumerate(arms):
    rs, c = [r for r in ck if r["arm"] == a["arm"]], f"C{i % 10}"
    g = [r["gamma"] for r in rs]
    ax.plot(g, [r["expected_loss"] for r in rs], "-", color=c,
            label=f"{a['arm']} (Γ_total {a['gamma_total']:.2f})")
    ax.axhline(a["floor"], color=c, ls="--", lw=0.8)
    a1.plot(g, [r["kl_centred"] for r in rs], "-", color=c, label=f"{a['arm']} centred")
    a1.plot(g, [r["kl_raw"] for r in rs], ":", color=c, label=f"{a['arm']} raw")
    a2.plot(g, [r["anisotropy_last"] for r in rs], "-", color=c, label=a["arm"])
  ax.axhline(arms[0]["H"], color="k", ls=":", lw=0.8, label="H (entropy rate)")
  ax.set_ylim(min(a["H"] for a in arms) - 0.05, max(a["floor"] for a in arms) + 1.0)
  ax.set(xlabel="Γ = λ Σ η", ylabel="expected loss (nats), fixed validation windows")
  ax.legend(fontsize=7)
  figure.save(fig, out, FIGS[0], "Expected loss vs Γ; dashed: floor(d)")
  a1.set(xlabel="Γ", ylabel="KL(σ ‖ u) of the head (nats)", title="centred (solid), raw (dotted)")
  a2.set(xlabel="Γ", ylabel="last-layer anisotropy")
  a1.legend(fontsize=6)
  a2.legend(fontsize=7)
  figure.save(fig2, out, FIGS[1], "Head spectrum and anisotropy vs Γ")


RISE_COLUMNS = ["arm", "seed", "gamma_total", "rise", "rise_ci_lo", "rise_ci_hi", "rise_null",
                "rise_p", "rise_above_null", "rise_verdict", "rise_start_step", "rise_peak_step",
                "kl_centred_peak", "kl_centred_jump", "anisotropy_peak"]
LEVEL_COLUMNS = ["arm", "final_expected_loss", "floor", "gap_to_floor", "final_kl_raw",
                 "final_kl_centred", "final_anisotropy", "final_rare_row_norm",
                 "final_frequent_row_norm", "train_rise", "rise_onset_step", "gamma_at_rise"]


def report(out, rel: str = ".") -> str:
  """The recipe, the arms' tables and figures, the seed bounds and the rule's verdict."""
  meta = json.loads((out / "planted_meta.json").read_text())
  summary = json.loads((out / "summary.json").read_text())
  k, lang = meta["knobs"], meta["language"]
  arms = read_rows(out / "planted_arms.csv")
  rule = RiseRule(**k["rule"])
  lines = [f"Language: V = {lang['vocab']}, M = {lang.get('n_mix')}, k = {lang['rank']}, Zipf "
           f"{lang.get('zipf', 1.0):g}, H = {fmt(lang['entropy_nats'])} nats; "
           f"{meta['tokens_per_arm']:,} fresh tokens per arm ({meta['steps']} steps of "
           f"{k['batch']} x {k['seq_len']}), η = {k['lr']:g}. rise: after {k['after']:.0%} of "
           f"training, with its 95% CI over {k['val_windows']} windows against {k['threshold']} "
           f"nats (rise_verdict) and its {rule.null_quantile:.0%} null level (rise_null).", ""]
  lines += md_table(arms, RISE_COLUMNS) + ["", *md_table(arms, LEVEL_COLUMNS), ""]
  lines += [f"![{s}]({rel}/{figure.name(s)})" for s in FIGS] + [""]
  lines += [f"- {a['arm']}: set aside {a['set_aside']}; its statistics use "
            f"{int(a['checkpoints_used'])} of {int(a['checkpoints_saved'])} checkpoints."
            for a in arms if a["set_aside"] != "none"]
  if summary["replicates"]:
    lines += ["", "Seeds of one arm (min, max: the seed bounds; n_above: seeds above their "
              "null level):", "", *md_table(summary["replicates"], [
                  "d", "weight_decay", "vocab", "zipf", "n", "n_above", "min", "max", "mean",
                  "sd", "t_lo", "t_hi", "half"])]
  if summary.get("rule"):
    v = summary["rule"]
    lines += ["", rule_text(rule, k["after"], k["ref_weight_decay"]), "",
              f"Verdict: **{v['verdict']}**: {v['reason']}."]
  return "\n".join(lines)


EXPERIMENT = Experiment("saturation_planted", PRESETS, plan, measure=measure,
                        measure_steps="all", measure_chunk=32, tables=tables, figures=draw,
                        report=report, reads_data=False, doc=__doc__)

if __name__ == "__main__":  # python -m experiments.saturation.planted
  from ..reproduce import main
  main("saturation_planted")
