r"""Convert between Hugging Face GPT-NeoX/GPT-Neo directories and sbjax workdirs.

Import (one HF directory, or a directory of ``stepN`` revisions)::

    python -m experiments.convert --from_hf=pythia-70m/step1000 --to=WORKDIR
    python -m experiments.convert --from_hf=pythia-70m --to=WORKDIR     # every revision
    python -m experiments.convert --from_hf=DIR --to=WORKDIR --step=5 [--allow_pickle]

writes WORKDIR/config.json and an orbax params checkpoint per step (the step is
--step, else parsed from a ``stepN`` directory name, else 0; for a series, each
revision's own step, optionally restricted to --step).

Export (a dense, tied or lowrank-head checkpoint)::

    python -m experiments.convert --from_workdir=WORKDIR --step=N --to_hf=DIR

writes DIR/config.json + DIR/model.safetensors for
``transformers.AutoModelForCausalLM.from_pretrained(DIR)`` (latest step if no --step).
"""

from __future__ import annotations

import json
import os

from absl import app, flags, logging

from experiments import common
from sbjax import checkpoint
from sbjax.config import Config
from sbjax.convert import hf_export, hf_import, series

FLAGS = flags.FLAGS
flags.DEFINE_string("from_hf", None, "HF model directory (or a directory of stepN revisions)")
flags.DEFINE_string("to", None, "sbjax workdir to import into")
flags.DEFINE_string("from_workdir", None, "sbjax workdir to export from")
flags.DEFINE_string("to_hf", None, "HF directory to export to")
flags.DEFINE_integer("step", None, "checkpoint step (import: the step to write / the revision "
                     "to take from a series; export: the step to read, default latest)")
flags.DEFINE_bool("allow_pickle", False, "allow PyTorch pickle (.bin) weights, loaded with "
                  "torch.load(weights_only=True); only for checkpoints you trust")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                  "dtype of the imported params / the exported weights")
flags.DEFINE_string("name", None, "run name for an imported config (default: directory name)")


def _check_workdir_config(workdir: str, config: Config):
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    return
  with open(path) as fh:
    existing = Config.from_dict(json.load(fh))
  if existing.model != config.model:
    diff = [f"{k}: {getattr(existing.model, k)!r} -> {getattr(config.model, k)!r}"
            for k in config.model.__dataclass_fields__
            if getattr(existing.model, k) != getattr(config.model, k)]
    raise ValueError(f"{workdir} already holds a different model config; differing fields: "
                     f"{diff}. Use an empty workdir.")


def import_to_workdir(src: str, workdir: str, *, step: int | None = None,
                      allow_pickle: bool = False, dtype: str = "float32",
                      name: str | None = None) -> list[int]:
  """Import a HF directory (or series) into ``workdir``; returns the steps written."""
  name = name or os.path.basename(os.path.normpath(src))
  written = []
  if series.is_series(src):
    model_cfg = series.series_config(src, dtype=dtype)
    config = hf_import.full_config(model_cfg, name)
    _check_workdir_config(workdir, config)
    steps = None if step is None else [step]
    for s, params in series.iter_series(src, dtype=dtype, allow_pickle=allow_pickle, steps=steps):
      checkpoint.write_params(workdir, config, params, s)
      logging.info("imported %s step %d -> %s", src, s, workdir)
      written.append(s)
    return written
  model_cfg, params = hf_import.import_hf(src, dtype=dtype, allow_pickle=allow_pickle)
  if step is None:
    step = series.parse_step(src) or 0
  config = hf_import.full_config(model_cfg, name)
  _check_workdir_config(workdir, config)
  checkpoint.write_params(workdir, config, params, step)
  logging.info("imported %s -> %s at step %d", src, workdir, step)
  return [step]


def export_from_workdir(workdir: str, out_dir: str, *, step: int | None = None,
                        dtype: str = "float32") -> int:
  """Export the params of ``workdir`` at ``step`` (latest if None); returns the step."""
  config, params, step = checkpoint.load_params(workdir, step)
  hf_export.export_hf(config.model, params, out_dir, dtype=dtype)
  logging.info("exported %s step %d -> %s", workdir, step, out_dir)
  return step


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  imp = FLAGS.from_hf is not None or FLAGS.to is not None
  exp = FLAGS.from_workdir is not None or FLAGS.to_hf is not None
  if imp == exp:
    raise app.UsageError("give either --from_hf=DIR --to=WORKDIR (import) or "
                         "--from_workdir=WORKDIR --to_hf=DIR (export)")
  if imp:
    if not (FLAGS.from_hf and FLAGS.to):
      raise app.UsageError("import needs both --from_hf and --to")
    steps = import_to_workdir(FLAGS.from_hf, FLAGS.to, step=FLAGS.step,
                              allow_pickle=FLAGS.allow_pickle, dtype=FLAGS.dtype, name=FLAGS.name)
    print(f"wrote steps {steps} to {FLAGS.to}")
  else:
    if not (FLAGS.from_workdir and FLAGS.to_hf):
      raise app.UsageError("export needs both --from_workdir and --to_hf")
    step = export_from_workdir(FLAGS.from_workdir, FLAGS.to_hf, step=FLAGS.step, dtype=FLAGS.dtype)
    print(f"wrote step {step} of {FLAGS.from_workdir} to {FLAGS.to_hf}")


if __name__ == "__main__":
  common.run(main)  # user mistakes (bad dirs, refused configs) -> one "error: ..." line, exit 2
