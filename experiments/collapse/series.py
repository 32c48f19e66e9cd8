"""The collapse pass over the checkpoints of one workdir: an imported series
(``experiments.convert --from_hf``) or a run, on given tokens.

  python -m experiments.collapse --series=WORKDIR --tokens=batch.npy --out=DIR

One token-level pass (``sbjax.studies.collapse_grid.collapse_pass_multi``, the grid's pass
and settings ``measure.SETTINGS``) per group of checkpoints: class means / variances on the
first ``collapse_sequences`` windows of the train split, NC4 and ``val_loss`` (mean next-token
NLL) on the first ``eval_sequences`` windows of the validation split. The data and the
refusals are the analysis's (``sbjax.analysis.data_source``, ``analyze.open_run``): with
``--tokens=FILE`` both splits are the windows of FILE in file order (the same windows; as
``analyze --tokens``); an imported workdir left on the synthetic default data is refused,
and so are duplicated revisions unless ``allow_duplicates``.

Writes OUT/collapse_series.csv (one row per step and min_count: the grid's metric and count
keys, ``val_loss``, the settings, ``duplicate_of``) and OUT/collapse_series_meta.json.
"""

from __future__ import annotations

import time

from .measure import COUNT_KEYS, METRICS, PASS_KEYS, SETTINGS, scalar
from ..shared import fmt, read_rows, upath, write_json, write_rows
from sbjax import checkpoint as ckpt
from sbjax.analysis import samples as samples_lib
from sbjax.analysis.analyze import open_run
from sbjax.analysis.forward import stack_params
from sbjax.analysis.settings import Settings
from sbjax.model import Model
from sbjax.studies import collapse_grid as cg

CSV = "collapse_series.csv"
META = "collapse_series_meta.json"


def series_settings(out, tokens: str = "", data_items=(), steps=(), allow_duplicates=False,
                    collapse_sequences: int = 64, eval_sequences: int = 64) -> Settings:
  """The analysis settings that choose the data, the samples and the steps."""
  return Settings(groups=("loss", "collapse"), tokens=tokens, data=tuple(data_items),
                  steps=tuple(steps), allow_duplicates=allow_duplicates,
                  collapse_sequences=collapse_sequences, eval_sequences=eval_sequences,
                  cka_sequences=eval_sequences, out_dir=str(out), progress=False, figures=False)


def _row(step: int, r: dict, min_count: int, dup) -> dict:
  row = {"step": step, "min_count": min_count, "val_loss": r["val_loss"],
         "val_tokens": r["val_tokens"], "train_tokens": r["train_tokens"]}
  row.update({k: scalar(r.get(k, float("nan"))) for k in METRICS + COUNT_KEYS})
  row.update(SETTINGS)
  row.update(unc3_reason=r.get("unc3_reason", ""), error=r["error"],
             duplicate_of="" if dup is None else dup)
  return row


def run_series(workdir, out, tokens: str = "", data_items=(), steps=(),
               allow_duplicates: bool = False, collapse_sequences: int = 64,
               eval_sequences: int = 64, min_counts=(1,), group_size: int = 4,
               chunk: int = 8) -> list[dict]:
  """Collapse metrics of every checkpoint of ``workdir`` (see the module doc); the rows."""
  t0 = time.perf_counter()
  out = upath(out)
  settings = series_settings(out, tokens, data_items, steps, allow_duplicates,
                             collapse_sequences, eval_sequences)
  run = open_run(workdir, settings)  # refusals: planted data of an import, duplicates
  ds = samples_lib.open_dataset(run.cfg, run.data_dir or run.workdir)
  n_train = getattr(ds, "n_train_windows", None)
  if n_train is not None and n_train < collapse_sequences:
    raise ValueError(f"the data of {workdir} holds {n_train} train windows of T+1="
                     f"{run.cfg.train.seq_len + 1} tokens, fewer than --collapse_sequences="
                     f"{collapse_sequences}; pass a smaller value or more tokens (windows are "
                     "never repeated)")
  sm = samples_lib.build(run.cfg, run.data_dir or run.workdir, settings, ds)
  mc = run.cfg.model
  abstract = ckpt.abstract_with_shardings(Model(mc).abstract_params())
  for s in run.steps:
    ckpt.check_params_match(run.workdir, s, abstract)
  min_counts = tuple(sorted(int(m) for m in min_counts))
  gsize = max(1, min(group_size, len(run.steps)))
  dups, rows = run.duplicates or {}, []
  with ckpt.ParamsReader(run.workdir, abstract) as reader:
    for g0 in range(0, len(run.steps), gsize):
      gsteps = run.steps[g0:g0 + gsize]
      plist = reader.read(gsteps)
      plist += [plist[-1]] * (gsize - len(gsteps))  # pad the last group: no recompilation
      res = cg.collapse_pass_multi(mc, stack_params(plist), sm.tr, sm.ev[:sm.n_eval],
                                   chunk=chunk, min_counts=min_counts,
                                   **{k: SETTINGS[k] for k in PASS_KEYS})
      for s, per in zip(gsteps, res):
        rows += [_row(s, per[m], m, dups.get(s)) for m in min_counts]
  write_rows(out / CSV, rows)
  write_json(out / META, {
      "workdir": str(workdir), "steps": list(run.steps), "min_counts": list(min_counts),
      "settings": SETTINGS, "samples": sm.info, "tokens": tokens, "data": list(data_items),
      "collapse_sequences": collapse_sequences, "eval_sequences": eval_sequences,
      "seconds": round(time.perf_counter() - t0, 1)})
  return rows


def series_section(out) -> str:
  """A short markdown table of collapse_series.csv (smallest min_count)."""
  rows = read_rows(upath(out) / CSV)
  mc0 = min(int(r["min_count"]) for r in rows)
  keys = ("val_loss", "nc1_log10_mean_cdnv", "nc2_norm_cov", "nc3_cos_mean", "unc3_cos_cov",
          "nc4_agreement", "n_classes")
  lines = [f"### Collapse over the checkpoints of a series (min_count {mc0})", "",
           "| step | " + " | ".join(keys) + " | duplicate_of |",
           "|---" * (len(keys) + 2) + "|"]
  for r in rows:
    if int(r["min_count"]) == mc0:
      lines.append(f"| {r['step']} | " + " | ".join(fmt(r[k]) for k in keys)
                   + f" | {fmt(r.get('duplicate_of', ''))} |")
  return "\n".join(lines) + "\n"
