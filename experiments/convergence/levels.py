"""Stabilisation at several levels and on several probe batches (issue 33, item 6):
``stab_levels.csv``, one row per (model, probe batch, kind, layer, level).

A layer's stabilisation step at level c is the first checkpoint after which its CKA to the
final checkpoint stays >= c (``sbjax.studies.stabilisation.stabilisation_step``; not the first
crossing), read from the primary token mode and estimator of ``measure/<model>/cka.csv``
(probe 0, the fixed batch) and ``measure/<model>/probe<j>/cka.csv`` (the disjoint probes,
``probes.py``). ``stabilisation_frac`` = step / final step (the final checkpoint's CKA is 1, so
every layer stabilises at the final step at the latest: a fraction of 1 means "only at the
end")."""

from __future__ import annotations

from pathlib import Path

from ..shared import read_rows, upath
from sbjax.studies import convergence as conv
from sbjax.studies import stabilisation as stab

STAB_LEVELS = (0.8, 0.9, 0.95)


def probe_dirs(mdir: Path) -> list[tuple[int, Path]]:
  """[(probe index, directory holding its cka.csv)]: mdir itself is probe 0."""
  out = [(0, mdir)]
  for d in sorted(mdir.glob("probe*")):
    if d.is_dir() and d.name[5:].isdigit() and (d / "cka.csv").exists():
      out.append((int(d.name[5:]), d))
  return sorted(out)


def model_levels(meta: dict, mdir: Path, levels=STAB_LEVELS) -> list[dict]:
  """The stab_levels.csv rows of one model (``meta``: its measure/<model>/meta.json)."""
  tok, est = meta["settings"]["token_modes"][0], meta["settings"]["estimators"][0]
  final, rows = meta["final_step"], []
  for probe, d in probe_dirs(upath(mdir)):
    cka = read_rows(d / "cka.csv")
    for kind in conv.KINDS:
      steps, c = conv.cka_matrix(cka, kind, tok, est)
      for layer in range(c.shape[1]):
        for level in levels:
          st = stab.stabilisation_step(steps, c[:, layer], level)
          rows.append({"model": meta["model"], "width": meta["width"],
                       "n_layers": meta["n_layers"], "probe": probe, "kind": kind,
                       "layer": layer, "level": level, "tokens": tok, "estimator": est,
                       "n_sequences": meta["settings"]["n_sequences"],
                       "stabilisation_step": st, "final_step": final,
                       "stabilisation_frac": st / final if st is not None and final else
                       float("nan")})
  return rows


def level_rows(out: Path, metas: list[dict]) -> list[dict]:
  """stab_levels.csv: every model's rows (``model_levels``)."""
  return [r for m in metas for r in model_levels(m, upath(out) / "measure" / m["model"])]
