"""The stabilisation reading (issue 33, item 6): which of the paper's claims the stabilisation
steps at several levels and on two probe batches support, refute or leave undecided, with
their scope; every number is read from ``stab_levels.csv`` (``levels.py``).

Each claim is judged in every cell (level c in ``STAB_LEVELS``, probe batch b); a claim is
*supported* when it holds in every cell, *refuted* when it fails in every cell and *undecided*
otherwise (it depends on the level or on the batch, named). The rules, fixed before any run:

* early: the largest model's median stabilisation fraction (over its MLP and OV layers) is
  <= ``PAPER_FRAC`` (0.2): "larger models' layers stabilise within ~20% of training";
* bottom-up: Spearman(layer index, stabilisation step) within each (model, kind), averaged
  over those strata (T) with the stratified permutation p
  (``sbjax.studies.stabilisation.stratified_spearman_test``): holds when T > 0 and p < 0.05,
  fails when T < 0 and p < 0.05; no significant order (or too few distinct steps) in a cell
  leaves the claim undecided in that cell;
* late top: the smallest model's later layers (index >= L/2, both kinds) have a median
  stabilisation fraction > ``PAPER_FRAC``: "small models' later layers stabilise late".

The batch agreement: per level, how many (model, kind, layer) have the same step on both
batches, and the largest difference as a fraction of training.
"""

from __future__ import annotations

import math

import numpy as np

from .levels import STAB_LEVELS
from .summary import PAPER_FRAC, cell
from ..shared import read_rows, span, upath
from sbjax.studies import stabilisation as stab

ALPHA = 0.05


def _cells(rows: list[dict]) -> list[tuple[float, int]]:
  return sorted({(float(r["level"]), int(r["probe"])) for r in rows})


def _sel(rows, level, probe, **eq) -> list[dict]:
  return [r for r in rows if float(r["level"]) == level and int(r["probe"]) == probe
          and all(r[k] == v for k, v in eq.items())]


def _median(rows) -> float:
  v = np.array([r["stabilisation_frac"] for r in rows], float)
  return float(np.nanmedian(v)) if np.isfinite(v).any() else float("nan")


def _by_width(rows) -> list[str]:
  """Model names from the smallest width to the largest."""
  return [m for _, m in sorted({(float(r["width"]), r["model"]) for r in rows})]


def bottom_up(rows, level, probe, n_perm: int = 10_000) -> tuple[float, float]:
  """(T, p): the stratified Spearman(layer, stabilisation step) of one cell."""
  sel = _sel(rows, level, probe)
  x = [float(r["layer"]) for r in sel]
  y = [float(r["stabilisation_step"]) if r["stabilisation_step"] not in (None, "") else
       math.nan for r in sel]
  res = stab.stratified_spearman_test(x, y, [f"{r['model']}/{r['kind']}" for r in sel],
                                      n_perm=n_perm)
  return float(res["statistic"]), float(res["p"])


def top_half(rows, model: str) -> list[dict]:
  return [r for r in rows if r["model"] == model and int(r["layer"]) >= int(r["n_layers"]) / 2]


def _verdict(outcomes: list) -> str:
  """supported / refuted / undecided from the cells' True / False / None."""
  if all(o is True for o in outcomes):
    return "supported"
  if all(o is False for o in outcomes):
    return "refuted"
  return "undecided"


def _label(level, probe) -> str:
  return f"{level:g}/batch {probe + 1}"


def claim_cells(rows: list[dict]) -> dict:
  """{claim: [(cell label, outcome True/False/None, text)]} of every cell (module doc), and
  "lower_late": per cell, whether the smallest model's lower layers are late too."""
  names = _by_width(rows)
  small, big = names[0], names[-1]
  out = {"early": [], "bottom_up": [], "late_top": []}
  for level, probe in _cells(rows):
    lab = _label(level, probe)
    med = _median(_sel(rows, level, probe, model=big))
    out["early"].append((lab, math.isfinite(med) and med <= PAPER_FRAC, cell(med, 2)))
    t, p = bottom_up(rows, level, probe)
    ok = None if not (math.isfinite(t) and p < ALPHA) else t > 0
    out["bottom_up"].append((lab, ok, f"T={cell(t, 2)} p={cell(p, 3)}"))
    top = _median(_sel(top_half(rows, small), level, probe))
    low = _median([r for r in _sel(rows, level, probe, model=small)
                   if int(r["layer"]) < int(r["n_layers"]) / 2])
    out["late_top"].append((lab, math.isfinite(top) and top > PAPER_FRAC,
                            f"{cell(top, 2)} (lower layers {cell(low, 2)})"))
    out.setdefault("lower_late", []).append(math.isfinite(low) and low > PAPER_FRAC)
  return out


def agreement(rows: list[dict]) -> list[dict]:
  """Per level: the (model, kind, layer) with a step on both probes 0 and 1, how many agree,
  and the largest |difference| of the stabilisation fraction (with where it is)."""
  out = []
  for level in sorted({float(r["level"]) for r in rows}):
    a = {(r["model"], r["kind"], int(r["layer"])): r for r in _sel(rows, level, 0)}
    b = {(r["model"], r["kind"], int(r["layer"])): r for r in _sel(rows, level, 1)}
    keys = sorted(set(a) & set(b))
    if not keys:
      continue
    d = [abs(float(a[k]["stabilisation_frac"]) - float(b[k]["stabilisation_frac"])) for k in keys]
    i = int(np.nanargmax(d)) if np.isfinite(d).any() else 0
    out.append({"level": level, "n": len(keys),
                "same": sum(a[k]["stabilisation_step"] == b[k]["stabilisation_step"]
                            for k in keys),
                "max_diff": d[i], "where": "/".join(map(str, keys[i]))})
  return out


CLAIMS = {
    "early": "the layers of the largest model stabilise within ~20% of training (median "
             "stabilisation fraction of {big}, level/batch: {cells})",
    "bottom_up": "layers stabilise bottom-up (stratified Spearman of layer index with "
                 "stabilisation step, level/batch: {cells})",
    "late_top": "a small model's later layers stabilise late, after 20% of training (median "
                "fraction of {small}'s layers L/2..L-1, level/batch: {cells})",
}


def depth_claims(rows: list[dict], scope: str) -> str:
  """The generated paragraph: each claim's verdict with every cell's number, the batch
  agreement, and the scope sentence ``scope`` (the runs' Γ against Pythia's)."""
  if not rows:
    return "Stabilisation at several levels: no stab_levels.csv rows."
  names = _by_width(rows)
  n_probe = len({int(r["probe"]) for r in rows})
  sup, con, und = [], [], []
  found = claim_cells(rows)
  lower_late = all(found.pop("lower_late"))
  for claim, cells in found.items():
    txt = CLAIMS[claim].format(big=names[-1], small=names[0], cells="; ".join(
        f"{lab} {t}" for lab, _, t in cells))
    if claim == "late_top" and lower_late:
      txt += (f"; {names[0]}'s lower layers also stabilise after 20% in every cell, so the "
              "lateness is not specific to the later layers")
    v = _verdict([o for _, o, _ in cells])
    held = sum(o is True for _, o, _ in cells)
    (sup if v == "supported" else con if v == "refuted" else und).append(
        txt + ("" if v != "undecided" else f"; holds in {held} of {len(cells)} cells"))
  n_seq = sorted({int(r["n_sequences"]) for r in rows})
  head = (f"Stabilisation (the first checkpoint after which CKA to the final checkpoint stays "
          f"≥ the level) at levels {', '.join(f'{x:g}' for x in STAB_LEVELS)} on {n_probe} "
          f"disjoint probe batch{'es' if n_probe > 1 else ''} of {span(n_seq)} sequences, "
          f"models {', '.join(names)}" + (" (one width: it is both the largest and the "
                                          "smallest model)" if len(names) == 1 else "")
          + ". A claim is supported when it holds at every level on every batch, refuted when "
          "it fails in every one, else undecided.")
  agree = agreement(rows)
  batches = " ".join(
      f"At {a['level']:g} the two batches give the same step for {a['same']} of {a['n']} "
      f"layers (largest difference {cell(a['max_diff'], 2)} of training, {a['where']})."
      for a in agree) if agree else "One probe batch only: no batch agreement."
  verdicts = [f"{name}: " + ("; ".join(v) or "none") + "." for name, v in
              (("Supported", sup), ("Refuted", con), ("Undecided", und))]
  return " ".join([head, *verdicts, batches, scope])


def levels_lines(rows: list[dict]) -> list[str]:
  """The table of median stabilisation fractions per model, level and batch."""
  lines = [("| model | level | batch | median stabilisation / final (all, MLP, OV) | layers "
            "L/2..L-1 | stabilised by 20% |"), "|---|---|---|---|---|---|"]
  for m in _by_width(rows):
    for level, probe in _cells(rows):
      sel = _sel(rows, level, probe, model=m)
      fr = np.array([r["stabilisation_frac"] for r in sel], float)
      lines.append(
          f"| {m} | {level:g} | {probe + 1} | {cell(_median(sel), 2)} "
          f"({cell(_median([r for r in sel if r['kind'] == 'mlp']), 2)}, "
          f"{cell(_median([r for r in sel if r['kind'] == 'ov']), 2)}) | "
          f"{cell(_median(_sel(top_half(rows, m), level, probe)), 2)} | "
          f"{100 * float(np.mean(np.nan_to_num(fr, nan=2.0) <= PAPER_FRAC)):.0f}% |")
  return lines


def section_lines(out, scope: str) -> list[str]:
  """The report's lines from ``out/stab_levels.csv`` (none when the run has no such file:
  runs made before it existed): the table and the generated paragraph."""
  path = upath(out) / "stab_levels.csv"
  if not path.exists():
    return []
  rows = read_rows(path)
  return [("Stabilisation by level and probe batch (median fraction of training after which "
           "CKA to the final checkpoint stays ≥ the level):"), "", *levels_lines(rows), "",
          depth_claims(rows, scope), ""]
