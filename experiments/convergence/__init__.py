r"""``convergence``: layer convergence against model width (Diehl Martinez, Lesci & Buttery 2024).
One model per width (and per seed of ``seeds``), trained with dense checkpoints (log-spaced 0, 1, 2, ..., 512 and every
``train.ckpt_every``); every checkpoint measured (``kernel``: each layer's CKA to the final
checkpoint on fixed probe batches, PERs) into checkpoints.csv. Per layer (``stats``): its
stabilisation step (the first checkpoint after which CKA stays ≥ 0.9). Outputs in OUT:
``layers.csv`` (per model, kind, layer, token mode and estimator: that step, as a fraction of
training, and the PERs), ``bands.csv`` (percentiles 10/25/50/75/90 over layers of CKA-to-final
per step), ``models.csv`` (per model: medians and shares by 20% of training), ``stabilisation.csv``
(Spearman(PER, stabilisation step) per model and kind with its exact permutation p, and
stratified by model and kind), ``stab_levels.csv`` (every layer's stabilisation step at levels
0.8, 0.9 and 0.95 on every probe batch), ``summary.json`` (with a ``rule``: its text and the
decision), ``fig_cka_bands``. A checkpoint series (a Pythia import) is measured per layer by
``experiments.analyze --tokens=F.npy --groups=loss,cka,per``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np

from sbjax import checkpoint as ckpt
from sbjax import optim, overrides
from sbjax.analysis.measure import identity
from sbjax.data import sources
from sbjax.experiment import Experiment, Group, digest, figure
from sbjax.studies.corpus import corpus_overrides

from ..common import md_table, read_rows, write_json, write_rows
from . import kernel as M
from .presets import PRESETS
from .stats import decide, stays_from, stratified_spearman_test

KINDS, TOKEN_MODES, ESTIMATORS = M.KINDS, M.TOKEN_MODES, M.ESTIMATORS
STAB_LEVEL, STAB_LEVELS, PAPER_FRAC = 0.9, (0.8, 0.9, 0.95), 0.2
PAPER_PARAMS, PERCENTILES = 160_000_000, (10, 25, 50, 75, 90)  # the paper's larger class
PER_COLUMNS = ("per_weights_final", "per_weights_mean", "per_full_final", "per_head_dim_final")


def configs(p, data=None) -> list:
  """[(width, Config)] of a preset: a synthetic source without ``data`` keeps its language, any
  other is put on the corpus ``data``; of the data.options, those of the source it ends with."""
  o = {**p.overrides, **({} if sources.get(p.overrides["data.source"]).synthetic and not data
                         else corpus_overrides(p.overrides["data.source"], data))}
  opts = {f.name for f in dataclasses.fields(sources.get(o["data.source"]).options)}
  o = {k: v for k, v in o.items() if k.removeprefix("data.options.") in opts
       or not k.startswith("data.options.")}
  return [(w, overrides.config_from(p.base, {
      **o, **{k: v[i] for k, v in p.knobs.per_width.items()}, "model.d_model": w,
      "name": f"convergence-d{w}"})) for i, w in enumerate(p.knobs.widths)]


def plan(ctx):
  for (w, cfg), s in itertools.product(configs(ctx.preset, ctx.data), ctx.knobs.seeds or [None]):
    m, seed = (f"d{w}", {}) if s is None else (f"d{w}s{s}", {"seed": s})
    yield Group(m, [overrides.apply(cfg, {f"train.{k}": v for k, v in seed.items()})],
                [{"model": m, "width": w, **seed}])


_REFERENCE: dict = {}  # the last member's probe batches and final activations


def measure(ctx, group, j, steps, params):
  """``kernel.measure_group`` on groups of ``group_size`` checkpoints; the CKA reference (the
  final checkpoint's activations) is computed once per member."""
  k, wd = ctx.knobs, ctx.workdirs(group)[j]
  cfg, final = ckpt.load_config(wd), ckpt.list_steps(wd)[-1]  # model.vocab_size resolved
  key = digest([str(wd), identity(wd, final), k])
  if key not in _REFERENCE:
    batches = M.probe_batches(ctx.dataset(group.configs[j]), k.n_sequences, k.probe_batches)
    _REFERENCE.clear()
    _REFERENCE[key] = batches, M.references(cfg.model, ckpt.load_params(wd, final)[1],
                                            batches, k)
  batches, refs = _REFERENCE[key]
  return [r for g0 in range(0, len(params), k.group_size)
          for r in M.measure_group(cfg.model, params[g0:g0 + k.group_size], batches, refs, k)]


def _matrix(rows, prefix: str, n_layers: int) -> np.ndarray:
  return np.array([[r[f"{prefix}_{i}"] for i in range(n_layers)] for r in rows], float)


def _layers(model, w, mc, knobs, rows) -> list[dict]:
  """The layers.csv rows of one model from its checkpoint rows (step order)."""
  steps, final, r, out = [x["step"] for x in rows], rows[-1]["step"], M.ranks(mc, knobs), []
  frac = lambda s: s / final if s is not None and final else float("nan")
  for kind, t, e in itertools.product(KINDS, TOKEN_MODES, ESTIMATORS):
    i = KINDS.index(kind)
    for layer, c in enumerate(_matrix(rows, f"cka0_{kind}_{t}_{e}", mc.n_layers).T):
      st = stays_from(steps, c, STAB_LEVEL)
      row = {"model": model, "width": w, "kind": kind, "layer": layer, "tokens": t,
             "estimator": e, "final_step": final}
      for src in (x for x in ("weights", "gradients") if f"per_{x}_{kind}_0" in rows[0]):
        v = [x[f"per_{src}_{kind}_{layer}"] for x in rows]
        row.update({f"per_{src}_final": v[-1], f"per_{src}_mean": float(np.mean(v)),
                    f"per_{src}_r": r[src][i]})
      out.append({**row, "stabilisation_step": st, "stabilisation_frac": frac(st), **{
          f"per_{src}_{x}": v for src in ("full", "head_dim") for x, v in (
              ("final", rows[-1][f"per_{src}_{kind}_{layer}"]), ("r", r[src][i]))}})
  return out


def _bands(model, w, mc, rows) -> list[dict]:
  final, out = rows[-1]["step"], []
  for kind, t, e in itertools.product(KINDS, TOKEN_MODES, ESTIMATORS):
    q = np.percentile(_matrix(rows, f"cka0_{kind}_{t}_{e}", mc.n_layers), PERCENTILES, 1).T
    out += [{"model": model, "width": w, "kind": kind, "tokens": t, "estimator": e,
             "step": x["step"], "frac": x["step"] / final if final else 0.0,
             **{f"p{p}": float(v) for p, v in zip(PERCENTILES, qq)}} for x, qq in zip(rows, q)]
  return out


def _median(v) -> float:
  v = np.asarray(v, float)
  return float(np.nanmedian(v)) if np.isfinite(v).any() else float("nan")


def _model_row(model, w, mc, layers, rows) -> dict:
  prim = [r for r in layers if _primary(r)]
  v = np.array([r["stabilisation_frac"] for r in prim], float)
  return {"model": model, "width": w, "n_layers": mc.n_layers, "final_step": rows[-1]["step"],
          "n_checkpoints": len(rows), "final_loss": rows[-1]["eval_loss"],
          "median_stabilisation_frac": _median(v), "share_stabilised_by_paper_frac": float(
              np.mean(np.nan_to_num(v, nan=2.0) <= PAPER_FRAC)),
          **{f"median_stabilisation_frac_{k}": _median(
              [r["stabilisation_frac"] for r in prim if r["kind"] == k]) for k in KINDS}}


def _column(rows, c) -> np.ndarray:
  return np.array([float(r[c]) if r.get(c) is not None else np.nan for r in rows])


def _stabilisation(layers) -> list[dict]:
  """Spearman(PER, stabilisation step) per (model, kind) and stratified over them."""
  out = []
  for t, e in sorted({(r["tokens"], r["estimator"]) for r in layers}):
    sel = [r for r in layers if (r["tokens"], r["estimator"]) == (t, e)]
    for y in (y for y in PER_COLUMNS if any(r.get(y) is not None for r in sel)):
      res = stratified_spearman_test(_column(sel, y), _column(sel, "stabilisation_step"),
                                     [f"{r['model']}/{r['kind']}" for r in sel])
      base = {"tokens": t, "estimator": e, "per": y}
      out += [{**base, "model": s["stratum"].split("/")[0], "kind": s["stratum"].split("/")[1],
               "n": s["n"], "spearman": s["rho"], "p_perm": s["p"], "exact": int(s["exact"])}
              for s in res["strata"]]
      out.append({**base, "model": "stratified", "kind": "mlp+ov", "n": len(sel),
                  "spearman": res["statistic"], "p_perm": res["p"], "exact": int(res["exact"])})
  return out


def _levels(model, w, mc, knobs, rows) -> list[dict]:
  """stab_levels.csv: the stabilisation step of every layer at each level on each probe."""
  steps, final, out = [x["step"] for x in rows], rows[-1]["step"], []
  for p in (p for p in range(knobs.probe_batches) if f"cka{p}_mlp_last_biased_0" in rows[0]):
    for kind in KINDS:
      for layer, c in enumerate(_matrix(rows, f"cka{p}_{kind}_last_biased", mc.n_layers).T):
        for level, st in ((lv, stays_from(steps, c, lv)) for lv in STAB_LEVELS):
          out.append({"model": model, "width": w, "n_layers": mc.n_layers, "probe": p,
                      "kind": kind, "layer": layer, "level": level, "tokens": "last",
                      "estimator": "biased", "n_sequences": knobs.n_sequences,
                      "stabilisation_step": st, "final_step": final, "stabilisation_frac":
                      st / final if st is not None and final else float("nan")})
  return out


def tables(ctx) -> None:
  layers, bands, models, levels, gamma = [], [], [], [], {}
  for name, g in ctx.groups.items():
    cfg, rows, w = ckpt.load_config(ctx.workdirs(g)[0]), ctx.measured[name], g.labels[0]["width"]
    lay = _layers(name, w, cfg.model, ctx.knobs, rows)
    layers += lay
    bands += _bands(name, w, cfg.model, rows)
    models.append(_model_row(name, w, cfg.model, lay, rows))
    levels += _levels(name, w, cfg.model, ctx.knobs, rows)
    gamma[name] = optim.gamma_total(cfg.train)
  stab, rule = _stabilisation(layers), ctx.knobs.rule
  for f, rows in (("layers", layers), ("bands", bands), ("models", models),
                  ("stabilisation", stab), ("stab_levels", levels)):
    write_rows(ctx.out / f"{f}.csv", rows)
  write_json(ctx.out / "summary.json", {
      "models": list(ctx.groups), "gamma_total": gamma, "probe_batches": 1 + max(
          r["probe"] for r in levels), "stratified": [r for r in stab if r["model"] ==
                                                      "stratified" and r["tokens"] == "last"
                                                      and r["estimator"] == "biased"],
      **({} if rule is None else {"rule": " ".join(type(rule).__doc__.split()),
                                  "decision": decide(rule, levels)})})


def draw(out) -> None:
  """fig_cka_bands: percentiles over layers of the last-token biased CKA-to-final per step
  (MLP and OV rows, a column per model)."""
  plt, models = figure.pyplot(), [r["model"] for r in read_rows(out / "models.csv")]
  bands = [r for r in read_rows(out / "bands.csv") if _primary(r)]
  fig, axes = plt.subplots(2, len(models), figsize=(3.4 * len(models) + 1, 5.6), squeeze=False,
                           sharey=True)
  for (i, kind), (j, name) in itertools.product(enumerate(KINDS), enumerate(models)):
    rows, ax = [r for r in bands if (r["model"], r["kind"]) == (name, kind)], axes[i][j]
    x, g = [r["step"] for r in rows], {p: [r[f"p{p}"] for r in rows] for p in PERCENTILES}
    ax.fill_between(x, g[10], g[90], color="C0", alpha=0.2, lw=0, label="10–90%")
    ax.fill_between(x, g[25], g[75], color="C0", alpha=0.4, lw=0, label="25–75%")
    ax.plot(x, g[50], color="C0", label="median")
    ax.axvline(PAPER_FRAC * x[-1], color="k", ls=":", lw=1, label="20% of training")
    ax.axhline(STAB_LEVEL, color="gray", ls="--", lw=0.8)
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.4)
    ax.set(xlim=(0, x[-1] * 1.15), ylim=(min(-0.05, min(g[10]) - 0.05), 1.05), xlabel="step",
           ylabel="CKA to final" if j == 0 else None, title=f"{name} {kind}")
  axes[0][0].legend(fontsize=7, loc="lower right")
  figure.save(fig, out, "fig_cka_bands", "CKA to the final checkpoint, over layers")


def _primary(r) -> bool:
  return (r["tokens"], r["estimator"]) == ("last", "biased")


def report(out, rel: str = ".") -> str:
  stab = [r for r in read_rows(out / "stabilisation.csv") if _primary(r)]
  levels = {}
  for r in read_rows(out / "stab_levels.csv"):
    levels.setdefault((r["model"], r["probe"], r["level"]), []).append(r["stabilisation_frac"])
  models, s = read_rows(out / "models.csv"), json.loads((out / "summary.json").read_text())
  big, d = max(r["n_params"] for r in read_rows(out / "runs.csv")), s.get("decision")
  rule = [] if d is None else [f"Pre-registered rule: {s['rule']}", "",
                               f"**{d['verdict']}** ({d['reason']}).", ""]
  return "\n".join([
      f"The paper's larger class (≥ {PAPER_PARAMS:,} parameters; its layers stabilise within "
      f"{PAPER_FRAC:.0%} of training): {'not tested here' if big < PAPER_PARAMS else 'in scope'}"
      f" (the largest model here: {big:,} parameters).", "", *rule,
      f"![CKA-to-final bands]({rel}/{figure.name('fig_cka_bands')})", "",
      "Per model (last-token, biased CKA; fractions of training; shares by 20%):", "",
      *md_table(models, list(models[0])), "",
      ("Spearman(PER, stabilisation step) per model and kind (exact permutation p), and "
       "stratified by model and kind:"), "",
      *md_table(stab, ["per", "model", "kind", "n", "spearman", "p_perm"]), "",
      "Median stabilisation fraction at each level, per probe batch:", "",
      *md_table([{"model": m, "probe": p, "level": lv, "median": _median(v)}
                 for (m, p, lv), v in levels.items()], ["model", "probe", "level", "median"])])


EXPERIMENT = Experiment("convergence", PRESETS, plan, measure=measure, measure_steps="all",
                        measure_chunk=8, tables=tables, figures=draw, report=report,
                        doc=__doc__)
