"""From the long per-checkpoint CSVs (measure/<model>/) to the summaries: bands.csv,
layers.csv / layers.md, correlations.csv, models.csv and stabilisation.csv.

Stabilisation (``sbjax.studies.stabilisation``): a layer's ``stabilisation_step`` is the first
checkpoint after which its CKA-to-final stays ≥ 0.9 (not the first crossing).
``stabilisation.csv``: Spearman(PER, stabilisation step) within each (model, kind) stratum
with its exact permutation p (n_layers! permutations), and the stratified test over all
(model, kind) strata (T = mean within-stratum ρ, y permuted within strata), per token mode,
estimator and PER column. PER columns: ``per_weights_*`` (the preset's r), and, from
``measure/<model>/per_variants.csv``, ``per_full_final`` (every singular value) and
``per_head_dim_final`` (top head_dim, the authors' convention) of the same run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..shared import fmt, read_rows, upath, write_rows
from sbjax.studies import convergence as conv
from sbjax.studies import stabilisation as stab

PAPER_FRAC = 0.2  # "large models converge within the first ~20% of training"
FRAC = 0.9  # a layer has converged at the first step with CKA >= 0.9 of its final value
STAB_LEVEL = 0.9  # ... and has stabilised from the first step after which CKA stays >= 0.9


def primary(settings: dict) -> tuple[str, str]:
  """The primary (token mode, estimator): the first of each (figure, tables)."""
  return settings["token_modes"][0], settings["estimators"][0]


def _bands(m: dict, cka: list[dict]) -> list[dict]:
  final, out = m["final_step"], []
  for kind in conv.KINDS:
    for tokens in m["settings"]["token_modes"]:
      for est in m["settings"]["estimators"]:
        s, c = conv.cka_matrix(cka, kind, tokens, est)
        for st, q in zip(s, conv.percentile_bands(c)):
          out.append({"model": m["model"], "width": m["width"], "kind": kind,
                      "tokens": tokens, "estimator": est, "step": int(st),
                      "frac": st / final if final else 0.0,
                      **{f"p{p}": float(v) for p, v in zip(conv.PERCENTILES, q)}})
  return out


def _model_row(m: dict, rows: list[dict], steps: list[dict]) -> dict:
  tok, est = primary(m["settings"])
  prim = [r for r in rows if r["tokens"] == tok and r["estimator"] == est]
  fr = np.array([r["first_frac"] for r in prim], float)
  return {"model": m["model"], "width": m["width"], "n_layers": m["n_layers"],
          "final_step": m["final_step"], "n_checkpoints": len(m["steps"]),
          "final_loss": float(steps[-1]["eval_loss"]),
          "median_first_frac": float(np.nanmedian(fr)) if np.isfinite(fr).any()
          else float("nan"),
          "share_by_paper_frac": float(np.mean(np.nan_to_num(fr, nan=2.0) <= PAPER_FRAC)),
          "median_first_frac_mlp": float(np.nanmedian(
              [r["first_frac"] for r in prim if r["kind"] == "mlp"])),
          "median_first_frac_ov": float(np.nanmedian(
              [r["first_frac"] for r in prim if r["kind"] == "ov"])),
          **_stab_cols(prim)}


def _stab_cols(prim: list[dict]) -> dict:
  """Median stabilisation fraction (all, MLP, OV) and the share stabilised by PAPER_FRAC."""
  sf = np.array([r["stabilisation_frac"] for r in prim], float)
  out = {"median_stabilisation_frac": float(np.nanmedian(sf)) if np.isfinite(sf).any()
         else float("nan"),
         "share_stabilised_by_paper_frac": float(np.mean(np.nan_to_num(sf, nan=2.0) <= PAPER_FRAC))}
  for kind in conv.KINDS:
    v = np.array([r["stabilisation_frac"] for r in prim if r["kind"] == kind], float)
    out[f"median_stabilisation_frac_{kind}"] = float(np.nanmedian(v)) if np.isfinite(v).any() \
        else float("nan")
  return out


def _correlations(layers: list[dict], models: list[str]) -> list[dict]:
  corr = []
  for t, e in sorted({(r["tokens"], r["estimator"]) for r in layers}):
    sel = [r for r in layers if r["tokens"] == t and r["estimator"] == e]
    for scope in ["all"] + models:
      for kind in ("all",) + conv.KINDS:
        rows = [r for r in sel if (scope == "all" or r["model"] == scope)
                and (kind == "all" or r["kind"] == kind)]
        for c in conv.correlations(rows, "first_frac" if scope == "all" else "first_step"):
          corr.append({"model": scope, "kind": kind, "tokens": t, "estimator": e, **c})
  return corr


def _with_stabilisation(rows: list[dict], cka: list[dict]) -> list[dict]:
  """Adds stabilisation_step (CKA stays ≥ STAB_LEVEL from there on) and its fraction."""
  mats = {}
  for r in rows:
    key = (r["kind"], r["tokens"], r["estimator"])
    if key not in mats:
      mats[key] = conv.cka_matrix(cka, *key)
    steps, c = mats[key]
    st = stab.stabilisation_step(steps, c[:, r["layer"]], STAB_LEVEL)
    r["stabilisation_step"] = st
    r["stabilisation_frac"] = st / r["final_step"] if st is not None and r["final_step"] else \
        float("nan")
  return rows


PER_COLUMNS = ("per_weights_final", "per_weights_mean", "per_full_final", "per_head_dim_final")


def _with_per_variants(rows: list[dict], variants: list[dict]) -> list[dict]:
  """Adds per_<variant>_final and per_<variant>_r (the final checkpoint's PER under each
  convention of ``conv.per_variant_ranks``) to each layer row."""
  if not variants:
    return rows
  final = max(int(v["step"]) for v in variants)
  got = {(v["variant"], v["kind"], int(v["layer"])): v for v in variants
         if int(v["step"]) == final}
  for r in rows:
    for variant in ("full", "head_dim"):
      v = got.get((variant, r["kind"], int(r["layer"])))
      if v is not None:
        r[f"per_{variant}_final"], r[f"per_{variant}_r"] = float(v["per"]), int(v["r"])
  return rows


def stabilisation_tests(layers: list[dict], n_perm: int = 10_000) -> list[dict]:
  """Spearman(PER, stabilisation step) per (model, kind) with exact permutation p, and the
  stratified permutation test over the (model, kind) strata; per token mode, estimator and
  PER column."""
  out = []
  for t, e in sorted({(r["tokens"], r["estimator"]) for r in layers}):
    sel = [r for r in layers if r["tokens"] == t and r["estimator"] == e]
    for y in PER_COLUMNS:
      if not any(r.get(y) is not None for r in sel):
        continue
      x = [float(r[y]) if r.get(y) is not None else math.nan for r in sel]
      st = [float(r["stabilisation_step"]) if r.get("stabilisation_step") is not None
            else math.nan for r in sel]
      g = [f"{r['model']}/{r['kind']}" for r in sel]
      res = stab.stratified_spearman_test(x, st, g, n_perm=n_perm)
      base = {"tokens": t, "estimator": e, "per": y}
      for srow in res["strata"]:
        model, kind = srow["stratum"].split("/")
        out.append({**base, "model": model, "kind": kind, "n": srow["n"],
                    "spearman": srow["rho"], "p_perm": srow["p"], "exact": int(srow["exact"])})
      out.append({**base, "model": "stratified", "kind": "mlp+ov", "n": len(sel),
                  "spearman": res["statistic"], "p_perm": res["p"], "exact": int(res["exact"])})
  return out


def summarise(out: Path, metas: list[dict]) -> None:
  """bands.csv, layers.csv/.md, correlations.csv and models.csv from measure/<model>/."""
  out = upath(out)
  bands, layers, models = [], [], []
  for m in metas:
    mdir = out / "measure" / m["model"]
    cka, per, steps = (read_rows(mdir / f) for f in ("cka.csv", "per.csv", "steps.csv"))
    for r in cka + per:
      r["layer"] = int(r["layer"])
    bands += _bands(m, cka)
    rows = _with_stabilisation(conv.layer_table(cka, per, FRAC), cka)
    pv = mdir / "per_variants.csv"
    rows = _with_per_variants(rows, read_rows(pv) if pv.exists() else [])
    layers += [{"model": m["model"], "width": m["width"], **r} for r in rows]
    models.append(_model_row(m, rows, steps))
  write_rows(out / "bands.csv", bands)
  write_rows(out / "layers.csv", layers)
  write_rows(out / "models.csv", models)
  write_rows(out / "correlations.csv", _correlations(layers, [m["model"] for m in metas]))
  write_rows(out / "stabilisation.csv", stabilisation_tests(layers))
  tok, est = primary(metas[0]["settings"])
  (out / "layers.md").write_text(layers_markdown(layers, tok, est) + "\n")


def cell(v, nd: int = 3) -> str:
  """A table cell: '–' for missing/NaN, numbers with nd decimals (nd=0: an integer)."""
  return fmt(v, spec=f".{nd}f")


def layers_markdown(layers: list[dict], tokens: str, estimator: str) -> str:
  """The per-layer table (primary token mode / estimator) as markdown, from layers.csv rows."""
  sel = [r for r in layers if r["tokens"] == tokens and r["estimator"] == estimator]
  has_g = any("per_gradients_final" in r for r in sel)
  head = ("| model | kind | layer | first step CKA ≥ 0.9·final | as % of training | stays from "
          "| PER (final) | PER r |" + (" grad PER (final) |" if has_g else ""))
  lines = [head, "|" + "---|" * (8 + has_g)]
  for r in sel:
    pct = r["first_frac"] * 100 if isinstance(r["first_frac"], float) and math.isfinite(
        r["first_frac"]) else None
    line = (f"| {r['model']} | {r['kind']} | {int(r['layer'])} | {cell(r['first_step'], 0)} | "
            f"{cell(pct, 1)} | {cell(r['stable_step'], 0)} | "
            f"{cell(r.get('per_weights_final'))} | {cell(r.get('per_weights_r'), 0)} |")
    if has_g:
      line += f" {cell(r.get('per_gradients_final'))} |"
    lines.append(line)
  return "\n".join(lines)
