r"""Analyse every checkpoint of a run (or of an imported Hugging Face series).

  python -m experiments.analyze --workdir=runs/tiny
  python -m experiments.analyze --workdir=runs/tiny --groups=loss,spectrum --eval_sequences=32
  # an imported series: say which tokens to measure on (refused on the synthetic default)
  python -m experiments.analyze --workdir=runs/p70m --tokens=batch.npy --eval_sequences=64
  python -m experiments.analyze --workdir=runs/p70m --data.source=text --data.path=DIR \
      --data.tokenizer=tokenizer.json

Writes OUT/metrics.csv (one row per checkpoint step), spectrum.npz (sigma_i/sigma_1 per
step), metrics.json (flags, samples, metric variants) and three figures, OUT = --out_dir or
WORKDIR/analysis. Each checkpoint is measured once (OUT/measure.json, keyed by the flags that
change a number): a killed analysis resumes, a changed flag recomputes. One analysis per OUT
(OUT/LOCK). Columns and samples: sbjax/analysis/analyze.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from contextlib import nullcontext

from absl import flags

from . import common
from .number_flags import define_number_list
from sbjax.analysis import analyze_run
from sbjax.analysis.settings import ALL_GROUPS, Settings
from sbjax.paths import upath
from sbjax.train.lock import workdir_lock

WORKDIR = flags.DEFINE_string("workdir", None, "the run (or imported series) to analyse",
                              required=True)
HELP = {  # the flag of each Settings field, typed as the field
    "groups": "metric groups: " + ",".join(ALL_GROUPS),
    "eval_sequences": "validation windows for loss, anisotropy and NC4",
    "anisotropy_tokens": "token positions sampled for anisotropy; 0 = all",
    "collapse_sequences": "train-split windows for the class means / variances",
    "min_count": "collapse: analysed classes have N_c >= this",
    "cdnv_exponent": "collapse: CDNV distance exponent k (authors 2, Galanti 1)",
    "weighted_mean": "collapse: token-weighted global mean (default: unweighted)",
    "nc4_search": "collapse: NC4 search set",
    "cka_sequences": "validation windows of the fixed CKA batch",
    "cka_tokens": "CKA on the last position of each sequence, or all positions",
    "cka_debiased": "debiased HSIC estimator for CKA",
    "w_error_dims": "ranks d of head_w_error_<d> (values > d_model are dropped)",
    "per_mlp_r": "PER of fc_out_kernel over the top r singular values; 0 = all",
    "spectrum_top": "sigma_i/sigma_1 kept per step",
    "seed": "seed of the anisotropy position sample",
    "batch_sequences": "sequences per forward chunk (bounds activation memory)",
    "group_size": "checkpoints per vmapped forward; 0 = from --max_group_bytes",
    "max_group_bytes": "memory budget of one group (params + activation estimate)",
    "steps": "analyse only these checkpoint steps (default: all)",
    "out_dir": "output directory; '' = WORKDIR/analysis",
    "progress": "progress on stderr: a bar on a terminal, log lines otherwise",
    "figures": "draw the figures",
    "tokens": "measure on these tokens: an integer .npy [n, T+1] (rows set T) or a flat .bin "
              "named by its dtype (x.uint16.bin); needed for an imported series",
    "data": "a data override KEY=VALUE (repeatable), spelled --data.KEY=VALUE, e.g. "
            "--data.source=text --data.path=DIR --data.tokenizer=tokenizer.json",
    "allow_duplicates": "analyse revisions of an imported series that duplicate another's "
                        "weights (import.json duplicate_of); refused otherwise",
}


def _define(f: dataclasses.Field):
  name, default, text = f.name, f.default, HELP[f.name]
  if name == "data":
    return flags.DEFINE_multi_string("data_override", [], text)
  if name == "groups":
    return flags.DEFINE_list(name, list(default), text)
  if isinstance(default, tuple):
    return define_number_list(name, list(default), text, example="1,2,4")
  if "bounds" in f.metadata and f.metadata["bounds"].choices:
    return flags.DEFINE_enum(name, default, list(f.metadata["bounds"].choices), text)
  define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
            str: flags.DEFINE_string}[type(default)]
  return define(name, default, text)


SETTINGS = {f.name: _define(f) for f in dataclasses.fields(Settings)}


def main(argv):
  del argv
  settings = Settings(**{name: flag.value for name, flag in SETTINGS.items()})
  out = settings.out_dir or f"{WORKDIR.value.rstrip('/')}/analysis"
  # one writer per OUT (OUT/LOCK); a folder that is no run is refused by analyze_run, untouched
  with workdir_lock(out) if (upath(WORKDIR.value) / "config.json").exists() else nullcontext():
    rows = analyze_run(WORKDIR.value, settings)
  common.result(json.dumps({"workdir": WORKDIR.value, "out_dir": out, "n_steps": len(rows),
                    "steps": [r["step"] for r in rows], "csv": f"{out}/metrics.csv"}))


def cli():
  """The ``sbjax-analyze`` console script (and ``python -m experiments.analyze``)."""
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  sys.argv = common.dotted_flags(sys.argv, "data", "data_override")  # --data.KEY=VALUE
  common.run_script(main, __name__)


if __name__ == "__main__":
  cli()
