r"""Convert between Hugging Face GPT-NeoX/GPT-Neo directories and sbjax workdirs (no network).

Import one HF directory, a directory of ``stepN`` revisions, or the HF cache that
``from_pretrained(..., revision=..., cache_dir=...)`` fills::

    python -m experiments.convert --from_hf=pythia-70m/step1000 --to=WORKDIR
    python -m experiments.convert --from_hf=pythia-70m --to=WORKDIR     # every revision
    python -m experiments.convert --from_hf=CACHE/models--EleutherAI--pythia-70m --to=WORKDIR \
        --revisions=0,1000:143000:10000      # revisions step1000, step1000-tokens4B, stage1-step...

writes WORKDIR/config.json and an orbax params checkpoint per step (a single directory's step
is --step, else the one its name gives, else 0). Every revision is checked and its weight
files hashed before anything is written; WORKDIR/import.json records the hashes and which
revisions duplicate another (refused by ``experiments.analyze`` unless
``--allow_duplicates``). A training workdir is refused (a params-only step would stop it
from resuming).

Export (a dense, tied or lowrank-head checkpoint; the latest step unless --step)::

    python -m experiments.convert --from_workdir=WORKDIR --step=N --to_hf=DIR

writes DIR/config.json + DIR/model.safetensors for ``AutoModelForCausalLM.from_pretrained``,
and the run's tokenizer as DIR/tokenizer.json + tokenizer_config.json for
``AutoTokenizer``. DIR may not be an sbjax workdir, and must be new or empty unless
``--overwrite``.

Every directory may be remote (``gs://bucket/dir``, ``sbjax.paths``): a remote ``--from_hf``
is read from one local copy, a remote ``--to_hf`` is written locally and uploaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from absl import app, flags, logging

from . import common, hf_cache
from sbjax import checkpoint
from sbjax.atomic import atomic_write_bytes, is_local
from sbjax.config import Config
from sbjax.data import hf_tokenizer
from sbjax.convert import hf_export, hf_import, integrity, revisions
from sbjax.paths import local_dir, staged_dir, upath
from sbjax.train.lock import workdir_lock

FLAGS = flags.FLAGS
flags.DEFINE_string("from_hf", None, "HF model directory, a directory of stepN revisions, an "
                    "HF cache, or a model id org/name of the HF cache ($HF_HUB_CACHE, else "
                    "$HF_HOME/hub)")
flags.DEFINE_string("to", None, "sbjax workdir to import into")
flags.DEFINE_string("from_workdir", None, "sbjax workdir to export from")
flags.DEFINE_string("to_hf", None, "HF directory to export to")
flags.DEFINE_integer("step", None, "checkpoint step (import: the step to write / the revision "
                     "to take from a series; export: the step to read, default latest)")
flags.DEFINE_string("revisions", None, "import: the revisions to take from a series, e.g. "
                    "'0,1000,5000', '0:10000' (a range) or '0:143000:10000' (every 10000)")
flags.DEFINE_bool("allow_pickle", False, "allow PyTorch pickle (.bin) weights, loaded with "
                  "torch.load(weights_only=True); only for checkpoints you trust")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                  "dtype of the imported params / the exported weights")
flags.DEFINE_string("name", None, "run name for an imported config (default: directory name)")
flags.DEFINE_bool("allow_nonfinite", False, "import: accept weights that hold NaN or inf "
                  "(refused by default, naming the tensors)")
flags.DEFINE_bool("overwrite", False, "export: replace the files of a non-empty --to_hf "
                  "directory (never an sbjax workdir)")


def check_import_target(workdir: str) -> None:
  """An import adds params-only steps: refuse a training workdir, where such a step would
  block resuming the run; ValueError naming what makes it one and the fix."""
  found = []
  if (upath(workdir) / "metrics.jsonl").exists():
    found.append("metrics.jsonl")
  if any((upath(checkpoint.ckpt_dir(workdir)) / str(s) / "opt").is_dir()
         for s in checkpoint.list_steps(workdir)):
    found.append("training checkpoints with optimizer state")
  if found:
    raise ValueError(f"--to={workdir} is a training workdir (it holds {' and '.join(found)}); "
                     "an import adds params-only steps, which would stop the run from resuming. "
                     "Import into a new --to directory (train from it with "
                     "--config.train.init_from=DIR)")


def _shared_config(chosen: list, dtype: str, workdir: str):
  """The one ModelConfig of the chosen revisions and of the workdir's config.json, if it has
  one; ValueError naming the fields that differ."""
  cfgs = [(r.name, hf_import.model_config_from_hf(hf_import.read_hf_config(r.path),
                                                  param_dtype=dtype, where=f"{r.name}: "))
          for r in chosen]
  if (upath(workdir) / "config.json").is_file():  # (a bad file is named)
    cfgs.insert(0, (f"--to={workdir}", Config.from_dict(checkpoint.read_config_dict(workdir)).model))
  n0, c0 = cfgs[0]
  diffs = [f"{n}: " + ", ".join(f"{k}={getattr(c, k)!r} (vs {getattr(c0, k)!r})"
                                for k in c.__dataclass_fields__ if getattr(c, k) != getattr(c0, k))
           for n, c in cfgs[1:] if c != c0]
  if diffs:
    raise ValueError(f"the model configs differ from that of {n0}: " + "; ".join(diffs)
                     + ". Import the revisions of one model, into a new --to directory")
  return c0


def _copy_tokenizer(revision_dir: str, workdir: str) -> None:
  """WORKDIR/tokenizer.json from the (last) revision, when the series ships one: the
  analysis tokenises a text corpus with it (never with a newly trained tokenizer)."""
  src = os.path.join(revision_dir, hf_tokenizer.JSON_NAME)
  dst = upath(workdir) / hf_tokenizer.JSON_NAME
  if os.path.isfile(src) and not dst.exists():
    hf_tokenizer.HFTokenizer(src)  # a readable tokenizer.json, before it is copied
    atomic_write_bytes(dst, Path(src).read_bytes())


def _chosen(src: str, step: int | None, steps) -> tuple[list, str]:
  """(the revisions to import, the layout): those of an HF cache or of a directory of
  revisions that ``steps`` (else ``step``) select, or one HF directory at ``step``, else the
  step its name gives, else 0."""
  if not os.path.isdir(src):
    raise FileNotFoundError(f"--from_hf={src} does not exist")
  cache = revisions.cache_repo(src) is not None
  if cache or not os.path.isfile(os.path.join(src, "config.json")):
    revs = revisions.find(src)
    if revs:
      selection = steps if steps not in (None, "", []) else (None if step is None else [step])
      return (revisions.select(revs, selection, where=f"{src}: "),
              "hf_cache" if cache else "revision_dirs")
  name = os.path.basename(os.path.normpath(src))
  info = revisions.parse_revision(name)
  at = step if step is not None else info["step"] if info else 0
  return [revisions.Revision(at, name, src)], "single"


def import_to_workdir(src: str, workdir: str, *, step: int | None = None,
                      allow_pickle: bool = False, dtype: str = "float32",
                      name: str | None = None, steps=None,
                      allow_nonfinite: bool = False) -> list[int]:
  """Import a HF directory, a directory of revisions or an HF cache into ``workdir``;
  ``steps``: a selection (``sbjax.convert.revisions.select``: a list, or "0,1000:5000:1000");
  ``step``: one revision of a series, or the step to write a single directory at. Returns
  the steps written; WORKDIR/import.json records the hashes and duplicates. ``src`` and
  ``workdir`` may be gs:// (any ``sbjax.paths`` scheme): a remote ``src`` is read from one
  local copy (``sbjax.paths.local_dir``). Every revision is checked before anything is
  written."""
  check_import_target(workdir)
  label = src if not is_local(src) else os.path.abspath(src)  # import.json's "source"
  if not is_local(src):
    if not upath(src).is_dir():
      raise FileNotFoundError(f"--from_hf={src} does not exist")
    src = local_dir(src)
  repo = revisions.cache_repo(src) if os.path.isdir(src) else None
  name = name or (repo.name.split("--")[-1] if repo else os.path.basename(os.path.normpath(src)))
  chosen, layout = _chosen(src, step, steps)
  for r in chosen:
    revisions.check_present(r, f"{src}: ")
  config = hf_import.full_config(_shared_config(chosen, dtype, workdir), name)
  records = [{"step": r.step, "name": r.name, "commit": r.commit, "tokens": r.tokens,
              **integrity.check_revision(r.name, r.path, allow_pickle, allow_nonfinite)}
             for r in chosen]
  with workdir_lock(workdir):
    check_import_target(workdir)  # again: a run may have started in the workdir meanwhile
    for r in chosen:
      _, params = hf_import.import_hf(r.path, dtype=dtype, allow_pickle=allow_pickle,
                                      allow_nonfinite=True)  # (checked above)
      checkpoint.write_params(workdir, config, params, r.step)
      logging.info("imported %s revision %s (step %d) -> %s", src, r.name, r.step, workdir)
    _copy_tokenizer(chosen[-1].path, workdir)
    integrity.merge_record(workdir, label, layout, records, where=f"{src}: ")
  return [r.step for r in chosen]


def export_from_workdir(workdir: str, out_dir: str, *, step: int | None = None,
                        dtype: str = "float32", overwrite: bool = False) -> int:
  """Export the params of ``workdir`` at ``step`` (latest if None); returns the step.
  ``out_dir`` must not be an sbjax workdir, and must be new or empty unless ``overwrite``.
  Either may be gs:// (``sbjax.paths``): the files are written locally, then uploaded."""
  hf_export.check_export_target(out_dir, overwrite=overwrite)
  config, params, step = checkpoint.load_params(workdir, step)
  tok_dir = local_dir(workdir, names=(hf_tokenizer.JSON_NAME, "tokenizer.model"))
  with staged_dir(out_dir) as d:
    hf_export.export_hf(config.model, params, d, dtype=dtype)
    kind = hf_tokenizer.export_tokenizer(tok_dir, d, config.model.max_len)
  if kind:
    logging.info("exported the run's tokenizer (%s) -> %s/tokenizer.json", kind, out_dir)
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
    src = hf_cache.resolve(FLAGS.from_hf)  # a model id org/name: its copy in the HF cache
    steps = import_to_workdir(src, FLAGS.to, step=FLAGS.step, steps=FLAGS.revisions,
                              allow_pickle=FLAGS.allow_pickle, dtype=FLAGS.dtype,
                              allow_nonfinite=FLAGS.allow_nonfinite,
                              name=FLAGS.name or hf_cache.model_name(FLAGS.from_hf))
    common.result(f"wrote steps {steps} to {FLAGS.to}")
  else:
    if not (FLAGS.from_workdir and FLAGS.to_hf):
      raise app.UsageError("export needs both --from_workdir and --to_hf")
    step = export_from_workdir(FLAGS.from_workdir, FLAGS.to_hf, step=FLAGS.step, dtype=FLAGS.dtype,
                               overwrite=FLAGS.overwrite)
    common.result(f"wrote step {step} of {FLAGS.from_workdir} to {FLAGS.to_hf}")


def cli():
  """The ``sbjax-convert`` console script (and ``python -m experiments.convert``)."""
  common.run_script(main, __name__)  # user mistakes -> one "error: ..." line, exit 2


if __name__ == "__main__":
  cli()
