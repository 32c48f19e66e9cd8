"""The analysis half of the saturation experiment on the checkpoints of one workdir: an
imported series (``experiments.convert --from_hf``, e.g. Pythia revisions, Godey's subject)
or a run, on given tokens.

  python -m experiments.saturation --series=WORKDIR --tokens=batch.npy --out=DIR

``sbjax.analysis.analyze_run`` with the groups loss, anisotropy, spectrum (the data, its
refusals and the cache are the analysis's: an imported workdir left on the synthetic default
data is refused, duplicated revisions too unless ``allow_duplicates``) into OUT/analysis/;
then OUT/saturation_series.csv (per checkpoint: eval loss, last-layer anisotropy, the raw and
vocabulary-centred head spectra ``head_kl_uniform[_centred]``, ``head_erank[_centred]``,
``head_w_error[_centred]_<d>``), OUT/saturation_series.json (the late-rise test of the eval
loss over checkpoints, ``measure.detect_rise``: rise = final − best, late_rise = rise >
rise_tol) and Godey's figures 3-5 for the series (``report.FIGS`` minus the scaling fit,
which needs several widths).
"""

from __future__ import annotations

import json
from pathlib import Path

from .measure import detect_rise
from .report import FIGS
from ..shared import fmt, read_rows, upath, write_json, write_rows
from sbjax import checkpoint as ckpt
from sbjax.analysis import analyze_run, figures
from sbjax.analysis.settings import Settings

CSV = "saturation_series.csv"
SUMMARY = "saturation_series.json"
KEYS = ("step", "eval_loss", "eval_acc", "anisotropy_last", "head_kl_uniform",
        "head_kl_uniform_centred", "head_erank", "head_erank_centred", "head_stable_rank",
        "head_sigma_max")


def series_settings(workdir, out, tokens: str = "", data_items=(), steps=(),
                    allow_duplicates: bool = False, eval_sequences: int = 64,
                    anisotropy_tokens: int = 4096) -> Settings:
  d = ckpt.load_config(workdir).model.d_model
  dims = tuple(k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= d)
  return Settings(groups=("loss", "anisotropy", "spectrum"), eval_sequences=eval_sequences,
                  cka_sequences=eval_sequences, anisotropy_tokens=anisotropy_tokens,
                  w_error_dims=dims, batch_sequences=min(32, eval_sequences), progress=False,
                  figures=False, tokens=tokens, data=tuple(data_items), steps=tuple(steps),
                  allow_duplicates=allow_duplicates, out_dir=str(upath(out) / "analysis"))


def run_series(workdir, out, tokens: str = "", data_items=(), steps=(),
               allow_duplicates: bool = False, eval_sequences: int = 64,
               anisotropy_tokens: int = 4096, rise_tol: float = 0.02) -> list[dict]:
  """Analyse, write the CSV / JSON and draw the figures (see the module doc); the rows."""
  out = upath(out)
  settings = series_settings(workdir, out, tokens, data_items, steps, allow_duplicates,
                             eval_sequences, anisotropy_tokens)
  rows = analyze_run(workdir, settings)
  keep = [k for k in rows[0] if k in KEYS or k.startswith("head_w_error_") or
          k == "duplicate_of"]
  table = [{k: r[k] for k in keep} for r in rows]
  write_rows(out / CSV, table)
  rise = detect_rise([r["step"] for r in rows], [r["eval_loss"] for r in rows], rise_tol)
  write_json(out / SUMMARY, {"workdir": str(workdir), "tokens": tokens,
                             "data": list(data_items), "rise_tol": rise_tol,
                             **{k: v for k, v in rise.items() if not k.startswith("i_")}})
  adir, label = [out / "analysis"], [upath(workdir).name]
  figures.plot_loss_anisotropy(adir, out / FIGS["loss_anisotropy"], labels=label,
                               title="Eval loss vs step, coloured by last-layer anisotropy")
  figures.plot_spectrum_heatmap(adir, out / FIGS["spectrum_heatmap"], labels=label)
  figures.plot_kl_uniform(adir, out / FIGS["kl_uniform"], labels=label)
  return table


def series_section(out, rel: str = ".") -> str:
  """The markdown section of a series: the per-checkpoint table, the rise and the figures."""
  out = upath(out)
  rows = read_rows(out / CSV)
  s = json.loads((out / SUMMARY).read_text())
  cols = [k for k in ("eval_loss", "anisotropy_last", "head_kl_uniform",
                      "head_kl_uniform_centred", "head_erank", "head_erank_centred")
          if k in rows[0]]
  lines = [f"### Saturation over the checkpoints of {Path(s['workdir']).name}", "",
           "| step | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
  lines += [f"| {r['step']} | " + " | ".join(fmt(r[k]) for k in cols) + " |" for r in rows]
  verdict = "a late rise" if s["late_rise"] else "no late rise"
  lines += ["", f"Eval loss: best {fmt(s['best'])} at step {s['best_step']}, final "
            f"{fmt(s['final'])} at step {s['final_step']}: rise {fmt(s['rise'])} nats, "
            f"{verdict} (tolerance {fmt(s['rise_tol'])}; one token sample, no bootstrap).", ""]
  lines += [f"![{k}]({rel}/{FIGS[k]})" for k in ("loss_anisotropy", "spectrum_heatmap",
                                                  "kl_uniform")]
  return "\n".join(lines) + "\n"
