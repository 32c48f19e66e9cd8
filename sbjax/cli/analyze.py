r"""Analyse every checkpoint of a run (or of an imported Hugging Face series).

  python -m experiments.analyze --workdir=runs/tiny
  python -m experiments.analyze --workdir=runs/tiny --groups=loss,spectrum --eval_sequences=32
  # an imported series: say which tokens to measure on (refused on the synthetic default)
  python -m experiments.analyze --workdir=runs/p70m --tokens=batch.npy --eval_sequences=64
  python -m experiments.analyze --workdir=runs/p70m --data.source=text --data.path=DIR \
      --data.tokenizer=tokenizer.json

Writes OUT/metrics.csv (one row per checkpoint step), OUT/spectrum.npz
(sigma_i/sigma_1, top k, per step), OUT/metrics.json (flags, sample sizes, metric
variants, sbjax version) and three figures, with OUT = --out_dir or WORKDIR/analysis.
Finished checkpoints are cached in OUT/cache/ (keyed by the settings), so a killed
analysis resumes where it stopped and a changed flag recomputes. A call holds OUT/LOCK (a
second analysis into the same OUT stops with one line naming it). The columns and the
samples are documented in sbjax/analysis/analyze.py.
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import nullcontext

from absl import flags

from . import common
from .number_flags import define_number_list
from .data_flags import (ALLOW_DUP, DATA, TOKENS, data_dot_flags, eval_sequences,
                         steps)
from sbjax.analysis import analyze_run
from sbjax.analysis.settings import ALL_GROUPS, DEFAULT_W_ERROR_DIMS, Settings
from sbjax.paths import upath
from sbjax.train.lock import workdir_lock

_D = Settings()
WORKDIR = flags.DEFINE_string("workdir", None, "the run (or imported series) to analyse",
                              required=True)
OUT_DIR = flags.DEFINE_string("out_dir", "", "output directory; '' = WORKDIR/analysis")
GROUPS = flags.DEFINE_list("groups", list(ALL_GROUPS), "metric groups: " + ",".join(ALL_GROUPS))
ANISO_TOK = flags.DEFINE_integer("anisotropy_tokens", _D.anisotropy_tokens,
                                 "token positions sampled for anisotropy; 0 = all")
COLL_SEQ = flags.DEFINE_integer("collapse_sequences", _D.collapse_sequences,
                                "train-split windows for the class means / variances")
MIN_COUNT = flags.DEFINE_integer("min_count", _D.min_count, "collapse: analysed classes have N_c >= this")
CDNV_EXP = flags.DEFINE_float("cdnv_exponent", _D.cdnv_exponent,
                              "collapse: CDNV distance exponent k (authors 2, Galanti 1)")
WEIGHTED = flags.DEFINE_bool("weighted_mean", _D.weighted_mean,
                             "collapse: token-weighted global mean (default: unweighted)")
NC4_SEARCH = flags.DEFINE_enum("nc4_search", _D.nc4_search, ["analyzed", "all"],
                               "collapse: NC4 search set")
CKA_SEQ = flags.DEFINE_integer("cka_sequences", _D.cka_sequences,
                               "validation windows of the fixed CKA batch")
CKA_TOK = flags.DEFINE_enum("cka_tokens", _D.cka_tokens, ["last", "all"],
                            "CKA on the last position of each sequence, or all positions")
CKA_DEB = flags.DEFINE_bool("cka_debiased", _D.cka_debiased, "debiased HSIC estimator for CKA")
W_DIMS = define_number_list("w_error_dims", list(DEFAULT_W_ERROR_DIMS),
                                   "ranks d of head_w_error_<d> (values > d_model are dropped)",
                                   example="16,64")
PER_R = flags.DEFINE_integer("per_mlp_r", _D.per_mlp_r,
                             "PER of fc_out_kernel over the top r singular values; 0 = all")
TOP = flags.DEFINE_integer("spectrum_top", _D.spectrum_top, "sigma_i/sigma_1 kept per step")
SEED = flags.DEFINE_integer("seed", _D.seed, "seed of the anisotropy position sample")
BATCH_SEQ = flags.DEFINE_integer("batch_sequences", _D.batch_sequences,
                                 "sequences per forward chunk (bounds activation memory)")
GROUP_SIZE = flags.DEFINE_integer("group_size", _D.group_size,
                                  "checkpoints per vmapped forward; 0 = from --max_group_bytes")
MAX_BYTES = flags.DEFINE_integer("max_group_bytes", _D.max_group_bytes,
                                 "memory budget of one group (params + activation estimate)")
CACHE = flags.DEFINE_bool("cache", True, "reuse / write the per-step cache")
FIGURES = flags.DEFINE_bool("figures", True, "draw the figures")
PROGRESS = flags.DEFINE_bool("progress", True, "progress on stderr: a bar on a terminal, "
                              "log lines otherwise")
JOIN_EVALS = flags.DEFINE_string("join_evals", "", "lm-eval results JSON (or a directory of "
                                 "them, one per step) joined onto metrics.csv by step")


def settings_from_flags() -> Settings:
  return Settings(
      groups=tuple(GROUPS.value), steps=steps(), eval_sequences=eval_sequences(_D.eval_sequences),
      anisotropy_tokens=ANISO_TOK.value,
      collapse_sequences=COLL_SEQ.value, min_count=MIN_COUNT.value, cdnv_exponent=CDNV_EXP.value,
      weighted_mean=WEIGHTED.value, nc4_search=NC4_SEARCH.value, cka_sequences=CKA_SEQ.value,
      cka_tokens=CKA_TOK.value, cka_debiased=CKA_DEB.value,
      w_error_dims=tuple(W_DIMS.value), per_mlp_r=PER_R.value,
      spectrum_top=TOP.value, seed=SEED.value, batch_sequences=BATCH_SEQ.value,
      group_size=GROUP_SIZE.value, max_group_bytes=MAX_BYTES.value, out_dir=OUT_DIR.value,
      use_cache=CACHE.value, figures=FIGURES.value, progress=PROGRESS.value,
      tokens=TOKENS.value, data=tuple(DATA.value), allow_duplicates=ALLOW_DUP.value,
      join_evals=JOIN_EVALS.value)


def main(argv):
  del argv
  settings = settings_from_flags()
  out = settings.out_dir or f"{WORKDIR.value.rstrip('/')}/analysis"
  # one writer per OUT (OUT/LOCK); a folder that is no run is refused by analyze_run, untouched
  with workdir_lock(out) if (upath(WORKDIR.value) / "config.json").exists() else nullcontext():
    rows = analyze_run(WORKDIR.value, settings)
  common.result(json.dumps({"workdir": WORKDIR.value, "out_dir": out, "n_steps": len(rows),
                    "steps": [r["step"] for r in rows], "csv": f"{out}/metrics.csv"}))


def cli():
  """The ``sbjax-analyze`` console script (and ``python -m experiments.analyze``)."""
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  sys.argv = data_dot_flags(sys.argv)
  # the data fields its messages name, as this command takes them (--data.KEY, flat keys)
  common.run_script(main, __name__)


if __name__ == "__main__":
  cli()
