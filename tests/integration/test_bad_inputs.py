"""The table of bad inputs (README "Errors"): each row feeds sbjax one wrong thing and checks
that the error is one clear line naming the problem and what to do, and that no existing
file was overwritten or deleted (the directory tree and every file's hash are compared
before and after; a bad checkpoint may only move, byte for byte, to checkpoints_bad/).

Rows call the same functions the CLI calls, in-process; the CLI rows run the CLI itself to
check the single `error:` line without a traceback, and that a refused call creates nothing."""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import configs
from sbjax import sharding as shd
from sbjax.config import Config, DataConfig, MeshConfig, ModelConfig
from sbjax.data import make_dataset
from sbjax.train import resolve_vocab, train
from sbjax.heads.lowrank import LowRankHead
from tests._corpus import generated_docs, write_corpus

# orbax leaves un-awaited read coroutines behind when a restore of a damaged step fails
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")]

ROOT = Path(__file__).resolve().parents[2]


def tiny_cfg(**train_kw) -> Config:
  cfg = configs.load("tiny")
  cfg = cfg.replace(model=dataclasses.replace(cfg.model, vocab_size=64))
  return cfg.replace(train=dataclasses.replace(cfg.train, steps=2, **train_kw))


# ----------------------------------------------------------------------------- the rows
# Each setup(tmp, ctx) prepares files under tmp and returns a zero-argument callable that
# must raise (or, for recovered checkpoints, log) the expected message.

def _text(tmp, path, seq_len=32, batch=4, vocab=200):
  cfg = DataConfig(source="text", options=dict(path=str(path), vocab_size=vocab))
  return lambda: make_dataset(cfg, seq_len=seq_len, global_batch_size=batch, seed=0,
                              workdir=str(tmp / "wd"), process_index=0, process_count=1)


def missing_corpus(tmp, ctx):
  return _text(tmp, tmp / "nowhere")


def empty_corpus(tmp, ctx):
  (tmp / "empty").mkdir()
  return _text(tmp, tmp / "empty")


def binary_corpus(tmp, ctx):
  (tmp / "bin").mkdir()
  (tmp / "bin" / "a.txt").write_bytes(b"\xff\xfe\x00\x81binary")
  (tmp / "bin" / "b.txt").write_bytes("caf\xe9\n".encode("latin-1"))

  def go():
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      return _text(tmp, tmp / "bin")()
  return go


def small_corpus(tmp, ctx):
  small = write_corpus(tmp / "small", generated_docs(5, 4, n_lines=10))
  return _text(tmp, small, seq_len=256, batch=128, vocab=60)


def _model(**kw):
  return lambda tmp, ctx: (lambda: ModelConfig(**{**dict(d_model=32, n_heads=2), **kw}))


def other_model_workdir(tmp, ctx):
  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  cfg = tiny_cfg()
  other = cfg.replace(model=dataclasses.replace(cfg.model, d_model=64, head="tied"))
  return lambda: train(other, wd, dataset=ctx["ds"], quiet=True)


def foreign_checkpoints(tmp, ctx):
  """config.json says d_model=32 but the checkpoints hold a d_model=16 model (copied in)."""
  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  cfg = json.loads((wd / "config.json").read_text())
  cfg["model"]["d_model"] = 16
  (wd / "config.json").write_text(json.dumps(cfg))
  return lambda: ckpt.load_params(wd)


def foreign_checkpoints_analysis(tmp, ctx):
  from sbjax.analysis import analyze_run
  from sbjax.analysis.settings import Settings

  go = foreign_checkpoints(tmp, ctx)
  del go
  return lambda: analyze_run(tmp / "run", Settings(groups=("spectrum",), progress=False,
                                                   out_dir=str(tmp / "analysis")))


def import_as_workdir(tmp, ctx):
  """A params-only workdir (an HF import) given to train: refused, not moved aside."""
  wd = tmp / "imported"
  cfg, params, _ = ckpt.load_params(ctx["run_dir"], 2)
  ckpt.write_params(wd, cfg, params, 2)
  return lambda: train(tiny_cfg(), wd, dataset=ctx["ds"], quiet=True)


def pickle_only_hf(tmp, ctx):
  d = tmp / "hf"
  d.mkdir()
  shutil.copy(ctx["hf_dir"] / "config.json", d / "config.json")
  (d / "pytorch_model.bin").write_bytes(b"not read: refused before loading")
  from sbjax.convert import import_hf
  return lambda: import_hf(str(d))


def hf_missing_keys(tmp, ctx):
  from sbjax.convert import import_hf, st_io

  d = tmp / "hf"
  shutil.copytree(ctx["hf_dir"], d)
  f = d / "model.safetensors"
  t = {k: np.array(v) for k, v in st_io.read_file(str(f)).items()}
  gone = sorted(k for k in t if k.endswith("attention.dense.weight"))[0]
  del t[gone]
  st_io.write_file(t, str(f))
  return lambda: import_hf(str(d))


def _collapse(feats=None, labels=None, n_classes=8):
  from sbjax import metrics

  rng = np.random.default_rng(0)
  h = rng.normal(size=(64, 4)).astype(np.float32) if feats is None else feats
  y = rng.integers(0, n_classes, 64) if labels is None else labels
  w = rng.normal(size=(n_classes, 4)).astype(np.float32)
  return lambda: metrics.collapse_metrics(h, y, w)


def nan_features(tmp, ctx):
  h = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
  h[3, 1] = np.nan
  return _collapse(feats=h)


def labels_out_of_range(tmp, ctx):
  y = np.random.default_rng(0).integers(0, 8, 64)
  y[5] = 8
  return _collapse(labels=y)


def one_class(tmp, ctx):
  return _collapse(labels=np.full(64, 3))


def mesh_not_dividing(tmp, ctx):
  return lambda: shd.mesh_shape(MeshConfig(data=-1, fsdp=3, tensor=1), 8)


def batch_not_divisible(tmp, ctx):
  import jax

  # a (4, 1, 1) mesh as the 4-host job would build it; check_divisible needs only its shape
  mesh = jax.sharding.AbstractMesh((4, 1, 1), shd.AXES)
  return lambda: shd.check_divisible(ModelConfig(d_model=32, n_heads=2), mesh, 6)


def seq_too_long(tmp, ctx):
  cfg = tiny_cfg()
  return lambda: cfg.replace(train=dataclasses.replace(cfg.train, seq_len=128))


def tokenizer_vocab(tmp, ctx):
  cfg = tiny_cfg()
  small = cfg.replace(model=dataclasses.replace(cfg.model, vocab_size=48))
  return lambda: resolve_vocab(small, 64)


def workdir_not_writable(tmp, ctx):
  (tmp / "a_file").write_text("a file, not a directory\n")
  return lambda: train(tiny_cfg(), tmp / "a_file" / "run", dataset=ctx["ds"], quiet=True)


def past_steps(tmp, ctx):
  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  cfg = tiny_cfg()
  return lambda: train(cfg.replace(train=dataclasses.replace(cfg.train, steps=1)), wd,
                       dataset=ctx["ds"], quiet=True)


def export_into_workdir(tmp, ctx):
  from sbjax.cli import convert  # deferred: it defines absl flags when imported
  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  return lambda: convert.export_from_workdir(str(wd), str(wd), overwrite=True)


def export_into_files(tmp, ctx):
  from sbjax.cli import convert
  (tmp / "hf").mkdir()
  (tmp / "hf" / "notes.txt").write_text("mine\n")
  return lambda: convert.export_from_workdir(str(ctx["run_dir"]), str(tmp / "hf"))


def import_into_training(tmp, ctx):
  from sbjax.cli import convert
  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  (wd / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 4.0}) + "\n")
  return lambda: convert.import_to_workdir(str(ctx["hf_dir"]), str(wd), step=3)


def analysis_out_not_writable(tmp, ctx):
  from sbjax.analysis import analyze_run
  from sbjax.analysis.settings import Settings

  wd = tmp / "run"
  shutil.copytree(ctx["run_dir"], wd)
  (tmp / "a_file").write_text("x\n")
  return lambda: analyze_run(wd, Settings(groups=("spectrum",), out_dir=str(tmp / "a_file" / "o"),
                                          progress=False))


# (name, setup, exception type, problem text, what-to-do text)
ROWS = [
    ("missing corpus directory", missing_corpus, ValueError, "does not exist",
     "set data.options.path"),
    ("empty corpus directory", empty_corpus, ValueError, "has no .txt files",
     "set data.options.path"),
    ("binary / non-UTF-8 files only", binary_corpus, ValueError,
     "no usable .txt file: skipped ['a.txt', 'b.txt']", "UTF-8"),
    ("corpus too small for one batch", small_corpus, ValueError, "needs at least 32769 tokens",
     "batch_size"),
    ("head rank > d_model", _model(head=LowRankHead(rank=33)), ValueError,
     "model.head.rank=33", "allowed: 1 .. d_model=32"),
    ("head rank < 0", _model(head=LowRankHead(rank=-1)), ValueError, "model.head.rank=-1",
     "allowed: 1 .. d_model=32"),
    ("head rank 0", _model(head=LowRankHead(rank=0)), ValueError, "model.head.rank=0",
     "allowed: 1 .. d_model=32"),
    ("planted rank 0", lambda t, c: (lambda: DataConfig(options=dict(rank=0))), ValueError,
     "data.options.rank=0", "allowed: 1 .. vocab=256"),
    ("n_mix 0", _model(head={"kind": "mos", "n_mix": 0}), ValueError, "model.head.n_mix=0",
     "allowed: an integer >= 1"),
    ("unknown config name", lambda t, c: (lambda: configs.get("pythia-7b")), ValueError,
     "unknown config name 'pythia-7b'", "known: "),
    ("unknown head", _model(head="softmax2"), ValueError, "model.head='softmax2'",
     "allowed: dense | tied | lowrank | mos | sigsoftmax"),
    ("workdir holding another model", other_model_workdir, ValueError,
     "holds a run with a different configuration",
     ("model.d_model: saved 32 -> now 64", "model.head.kind: saved 'dense' -> now 'tied'",
      "Use a new --workdir")),
    ("checkpoints of another model under a config.json", foreign_checkpoints, ValueError,
     "written by another model configuration", "Use the workdir the checkpoints came from"),
    ("analysis of another model's checkpoints", foreign_checkpoints_analysis, ValueError,
     "written by another model configuration", "['block_0']['attn']['v_kernel']: saved (32, 2, 16) -> model (16, 2, 8)"),
    ("an imported (params-only) workdir given to train", import_as_workdir, ValueError,
     "holds parameters only (an import", "train from it with train.init_from instead"),
    ("HF directory with only pickle weights", pickle_only_hf, ValueError,
     "has only PyTorch pickle weights", "--allow_pickle"),
    ("HF directory with missing keys", hf_missing_keys, ValueError, "missing keys (1)",
     "attention.dense.weight"),
    ("NaN in features passed to metrics", nan_features, ValueError,
     "contains 1 non-finite value(s)", "clean the input"),
    ("labels out of range", labels_out_of_range, ValueError, "labels must lie in [0, V=8)",
     "found values in [0, 8]"),
    ("one analysed class only", one_class, ValueError, "need at least 2 analysed classes",
     "lower min_count or accumulate more tokens"),
    ("mesh that does not divide the devices", mesh_not_dividing, ValueError,
     "does not divide the 8 devices", "choose sizes whose product divides 8"),
    ("batch not divisible by the data axis", batch_not_divisible, ValueError,
     "global batch 6 is not divisible by the data-parallel size data*fsdp=4",
     "use a batch that is a multiple of 4"),
    ("sequence longer than max_len", seq_too_long, ValueError, "train.seq_len=128",
     "allowed: <= model.max_len=64"),
    ("tokenizer vocabulary larger than the model's", tokenizer_vocab, ValueError,
     "model.vocab_size=48 is smaller than the data's vocabulary (64 tokens)",
     "set model.vocab_size=64 or 0"),  # train's --config.: test_refusals_name_the_flag_w3
    ("workdir not writable", workdir_not_writable, OSError, "cannot create",
     "choose a writable folder"),
    ("workdir past train.steps", past_steps, ValueError, "is already at step 2, past "
     "train.steps=1", ("pass train.steps >= 2", "new --workdir")),
    ("export into a workdir", export_into_workdir, ValueError, "is an sbjax workdir",
     "give a new directory"),
    ("export into a non-empty directory", export_into_files, ValueError,
     "is not empty (1 entries: notes.txt)", "--overwrite"),
    ("import into a training workdir", import_into_training, ValueError,
     "is a training workdir (it holds metrics.jsonl and training checkpoints",
     "new --to directory"),
    ("analysis output directory not writable", analysis_out_not_writable, OSError,
     "is not writable", "pass a writable --out_dir"),
]


def snapshot(root: Path) -> dict:
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(root.rglob("*")) if p.is_file()}


def assert_nothing_lost(root: Path, before: dict) -> None:
  """Every file is still there with the same bytes: at its path, or (a bad checkpoint
  step) under checkpoints_bad/<step>_<time>/ with the same relative path."""
  after = snapshot(root)
  moved = {}
  for rel, h in after.items():
    parts = Path(rel).parts
    if "checkpoints_bad" in parts:
      i = parts.index("checkpoints_bad")
      step = parts[i + 1].split("_")[0]
      orig = Path(*parts[:i], "checkpoints", step, *parts[i + 2:])
      moved[str(orig)] = h
  for rel, h in before.items():
    assert after.get(rel, moved.get(rel)) == h, f"{rel} was overwritten or deleted"


@pytest.mark.parametrize("name,setup,exc,problem,todo", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input(name, setup, exc, problem, todo, tmp_path, ds, run_dir, request):
  ctx = {"ds": ds, "run_dir": run_dir}
  if setup in (pickle_only_hf, hf_missing_keys, import_into_training):
    ctx["hf_dir"] = request.getfixturevalue("hf_dir")
  action = setup(tmp_path, ctx)
  before = snapshot(tmp_path)
  with pytest.raises(exc) as e:
    action()
  msg = str(e.value)
  first = msg.splitlines()[0]
  for text in (problem, *((todo,) if isinstance(todo, str) else todo)):
    assert text in msg, (text, msg)
  assert problem in first, f"the first line does not name the problem: {first!r}"
  assert "Traceback" not in msg and len(first) < 600, msg
  assert_nothing_lost(tmp_path, before)


# ----------------------------------------------------------------------------- CLI rows
CLI = [
    ("unknown config name", ["-m", "experiments.train", "--config=nope", "--workdir={tmp}/w"],
     "error: flag --config=nope: unknown config name 'nope'"),
    ("head rank > d_model", ["-m", "experiments.train", "--config=tiny", "--workdir={tmp}/w",
                             "--config.model.head=lowrank", "--config.model.head.rank=99"],
     "error: invalid config: model.head.rank=99; allowed: 1 .. d_model=32"),
    ("unknown config key", ["-m", "experiments.train", "--config=tiny", "--workdir={tmp}/w",
                            "--config.train.stepz=5"],
     "error: invalid config key 'train.stepz'; did you mean 'train.steps'?"),
    ("analysis of a missing workdir", ["-m", "experiments.analyze", "--workdir={tmp}/nope"],
     "error: the workdir"),
    ("NaN learning rate", ["-m", "experiments.train", "--config=tiny", "--workdir={tmp}/w",
                           "--config.train.lr=nan"], "error: invalid config: train.lr=nan"),
]


@pytest.mark.e2e  # starts a CLI process (the e2e layer; tests/conftest.py)
@pytest.mark.parametrize("name,argv,needle", CLI, ids=[c[0] for c in CLI])
def test_cli_one_error_line(name, argv, needle, tmp_path):
  (tmp_path / "keep.txt").write_text("keep me\n")
  before = snapshot(tmp_path)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("SBJAX_DEBUG", None)
  r = subprocess.run([sys.executable] + [a.format(tmp=tmp_path) for a in argv], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and needle in errors[0], r.stderr[-2000:]
  assert "Traceback" not in r.stderr and "jax/_src" not in r.stderr, r.stderr[-2000:]
  assert snapshot(tmp_path) == before  # nothing created, changed or deleted
