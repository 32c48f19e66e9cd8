"""Bad inputs of ``train``: each row one ``error:`` line, nothing written or changed; the helpers."""

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from sbjax import checkpoint as ckpt
from sbjax import configs, overrides
from sbjax import sharding as shd
from sbjax.atomic import atomic_write_bytes
from sbjax.cli import common
from sbjax.config import DataConfig, MeshConfig, ModelConfig
from sbjax.data import make_dataset
from sbjax.train import resolve_vocab, train
from tests._corpus import generated_docs, write_corpus
from tests._tiny import tiny_config
from tests._unicode_corpus import unicode_docs

ROOT = Path(__file__).resolve().parents[2]


def tiny_cfg(**train_kw):
  return tiny_config(**{"steps": 2, **train_kw})


# ----------------------------------------------------------------------------- the checks
def snapshot(root: Path) -> dict:
  """Every file's sha256 and every link's target under ``root`` (links are not followed)."""
  out = {}
  for d, dirs, files in os.walk(root):
    for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
      p = Path(d) / name
      rel = str(p.relative_to(root))
      out[rel] = (f"-> {os.readlink(p)}" if p.is_symlink() else
                  hashlib.sha256(p.read_bytes()).hexdigest())
  return out


def assert_nothing_lost(root: Path, before: dict) -> None:
  """Every file and link is still there as it was: at its path, or (a bad checkpoint step)
  under checkpoints_bad/<step>_<time>/ with the same relative path."""
  after = snapshot(root)
  moved = {}
  for rel, h in after.items():
    parts = Path(rel).parts
    if "checkpoints_bad" in parts:
      i = parts.index("checkpoints_bad")
      orig = Path(*parts[:i], "checkpoints", parts[i + 1].split("_")[0], *parts[i + 2:])
      moved[str(orig)] = h
  for rel, h in before.items():
    assert after.get(rel, moved.get(rel)) == h, f"{rel} was changed or deleted"


CACHES = ("tokens", "data")  # folders of the data layer's caches (token streams, a tokenizer)


def assert_unchanged(root: Path, before: dict) -> None:
  """Nothing changed, deleted or added under ``root``, except the data layer's content-keyed
  caches (``tokens/``, ``analysis/data/``)."""
  after = snapshot(root)
  assert {k: v for k, v in after.items() if k in before} == before
  added = [k for k in after if k not in before and not set(Path(k).parts[:-1]) & set(CACHES)]
  assert not added, added


def refusal(action) -> tuple[int, str]:
  """(exit status, error line) the command line gives for the exception ``action`` raises."""
  try:
    action()
  except Exception as e:  # noqa: BLE001 - the boundary's own input
    return common.error_line(e, "LOG")
  raise AssertionError("the input was not refused")


def check_line(status: int, line: str, expected: str, code: int) -> None:
  first = line.splitlines()[0]
  assert first.startswith("error: ") and expected in first, (expected, line)
  assert status == code and "Traceback" not in line and len(first) < 800, (status, line)


def run_table(tmp: Path, rows, table_dir) -> dict:
  """Set up every row of a table, run the commands in one ``tests._cli_fork`` interpreter;
  {name: (result, snapshot before, row folder)}."""
  cmds, prepared = [], {}
  for name, setup, *_ in rows:
    d = tmp / re.sub(r"\W+", "_", name)
    d.mkdir()
    cmds.append(setup(d, table_dir))
    prepared[name] = (snapshot(d), d)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-m", "tests._cli_fork", json.dumps(cmds)], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  results = json.loads(r.stdout)
  return {n: (res, *prepared[n]) for n, res in zip(prepared, results)}


def check_cli(result: dict, expected: str, code: int) -> None:
  """One ``error:`` line holding ``expected``, the exit status, no traceback on stderr, and a
  traceback log (in the temp folder) for the errors that reach the boundary."""
  err = result["stderr"]
  lines = [x for x in err.splitlines() if x.startswith("error:")]
  assert len(lines) == 1 and expected in lines[0], err[-3000:]
  assert result["rc"] == code and "Traceback" not in err, (result["rc"], err[-3000:])
  log = re.search(r"\[traceback: (\S+?)[;\]]", lines[0])
  if log:
    assert "Traceback" in Path(log.group(1)).read_text()


# ----------------------------------------------------------------------------- the boundary
MADE_UP = """
import sys
import sbjax.train
class MadeUpError(Exception):
  pass
def train(*a, **k):
  raise MadeUpError("deep inside the command")
sbjax.train.train = train
from sbjax.cli.train import cli
sys.argv = ["sbjax-train", "--config=tiny", "--workdir=" + sys.argv[1]] + sys.argv[2:]
cli()
"""


def test_an_exception_of_any_type_is_one_line_naming_a_bug_and_its_traceback_log(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  runs = [subprocess.run([sys.executable, "-c", MADE_UP, str(tmp_path / "w"), *extra], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
          for extra in ([], ["--traceback"])]
  quiet, shown = runs
  lines = [x for x in quiet.stderr.splitlines() if x.startswith("error:")]
  assert quiet.returncode == 1 and len(lines) == 1, quiet.stderr[-3000:]
  assert lines[0].startswith("error: a bug in sbjax, not in your input: MadeUpError: deep inside "
                             "the command [traceback: "), lines[0]
  assert "Traceback" not in quiet.stderr
  log = Path(re.search(r"\[traceback: (\S+?);", lines[0]).group(1))
  assert "MadeUpError: deep inside the command" in log.read_text() and "Traceback" in \
      log.read_text() and not str(log).startswith(str(tmp_path))
  assert shown.returncode == 1 and "Traceback (most recent call last)" in shown.stderr
  assert "[traceback: shown above;" in shown.stderr


def test_a_failed_write_names_the_file_it_was_writing(tmp_path, monkeypatch):
  def full(*a, **k):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(os, "replace", full)
  status, line = refusal(lambda: atomic_write_bytes(tmp_path / "metrics.csv", b"x"))
  check_line(status, line, f"error: {tmp_path / 'metrics.csv'}: No space left on device", 2)
  assert os.listdir(tmp_path) == []  # no temporary file left behind


# ----------------------------------------------------------------------------- train (in-process)
def over(text: str):
  """A row of ``--config.KEY=VALUE`` text (space-separated), as the command applies it."""
  items = dict(item.split("=", 1) for item in text.split())
  return lambda tmp, ctx: (lambda: overrides.apply(tiny_cfg(), items, parse=True))


def _text(tmp, path, seq_len=32, batch=4, vocab=200):
  cfg = DataConfig(source="text", options=dict(path=str(path), vocab_size=vocab))
  return lambda: make_dataset(cfg, seq_len=seq_len, global_batch_size=batch, seed=0,
                              workdir=str(tmp / "wd"), process_index=0, process_count=1)


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


def _tokens(tmp, name, ids, item, **options):
  np.asarray(ids).astype(item).tofile(tmp / name)
  cfg = DataConfig(source="tokens", options=dict(path=str(tmp / name), **options))
  return lambda: make_dataset(cfg, seq_len=16, global_batch_size=2, workdir=str(tmp / "run"))


def token_rows_too_short(tmp, ctx):
  np.save(tmp / "short.npy", np.zeros((6, 9), np.int32))
  cfg = DataConfig(source="tokens", options=dict(path=str(tmp / "short.npy"), vocab=53))
  return lambda: make_dataset(cfg, seq_len=16, global_batch_size=2, workdir=str(tmp / "run"))


def vocab_below_characters(tmp, ctx):
  corpus = write_corpus(tmp / "corpus", unicode_docs())  # 202 distinct characters
  return _text(tmp, corpus, seq_len=16, batch=2, vocab=12)


def _copy_run(tmp, ctx):
  shutil.copytree(ctx["run_dir"], tmp / "run")
  return tmp / "run"


def other_model_workdir(tmp, ctx):
  wd, cfg = _copy_run(tmp, ctx), tiny_cfg()
  other = cfg.replace(model=dataclasses.replace(cfg.model, d_model=64, head="tied"))
  return lambda: train(other, wd, dataset=ctx["ds"], quiet=True)


def import_as_workdir(tmp, ctx):
  cfg, params, _ = ckpt.load_params(ctx["run_dir"], 2)
  ckpt.write_params(tmp / "imported", cfg, params, 2)
  return lambda: train(tiny_cfg(), tmp / "imported", dataset=ctx["ds"], quiet=True)


def workdir_not_writable(tmp, ctx):
  (tmp / "a_file").write_text("a file, not a directory\n")
  return lambda: train(tiny_cfg(), tmp / "a_file" / "run", dataset=ctx["ds"], quiet=True)


def past_steps(tmp, ctx):
  wd = _copy_run(tmp, ctx)
  return lambda: train(tiny_cfg(steps=1), wd, dataset=ctx["ds"], quiet=True)


def eval_batches_beyond_memory(tmp, ctx):
  return lambda: train(tiny_cfg(eval_batches=10**12), tmp / "run", dataset=ctx["ds"], quiet=True)


def batch_not_divisible(tmp, ctx):
  import jax

  mesh = jax.sharding.AbstractMesh((4, 1, 1), shd.AXES)  # the data axis of a 4-host job
  return lambda: shd.check_divisible(ModelConfig(d_model=32, n_heads=2), mesh, 6)


R = "invalid config: "
CONFIG_ROWS = [  # --config.KEY=VALUE text, the error line holds (bounds declared with the config)
    (f"train.seed={2**70}", R + "train.seed=1180591620717411303424; allowed: an integer >= 0 and "
     "<= 4294967295"),
    ("model.init_std=nan", R + "model.init_std=nan; allowed: a finite"),
    ("model.ln_eps=-1", R + "model.ln_eps=-1.0; allowed: a finite number > 0"),
    ("train.b2=1", R + "train.b2=1.0; allowed: a finite number >= 0.0 and < 1.0"),
    ("data.options.alpha=inf", R + "data.options.alpha=inf"),
    ("data.options.vocab=1", R + "data.options.vocab=1"),
    ("mesh.data=0", R + "mesh=(0, 1, 1)"),
    ("model.dtype=float8", R + "model.dtype='float8'; allowed: float32 | bfloat16 | float16 | float64"),
    ("data.options.sampler=device", R + "data.options.train_tokens=200000; allowed: 0 with "
     "data.options.sampler=device"),
    ("data.source=nope", R + "data.source='nope'; allowed: planted | "),
    ("data.source=tokens", R + "data.options.path=''"),
    ("model.head=lowrank model.head.rank=33", R + "model.head.rank=33; allowed: 1 .. d_model=32"),
    ("train.lr=fast", "config override train.lr='fast'"),
    ("train.seq_len=128", R + "train.seq_len=128; allowed: <= model.max_len=64"),
]
TRAIN_ROWS = [(text, over(text), want, 2) for text, want in CONFIG_ROWS] + [
    # name, setup, the error line holds, exit status
    ("unknown config name", lambda t, c: (lambda: configs.get("pythia-7b")),
     "unknown config name 'pythia-7b'", 2),
    # work sized before it starts
    ("evaluation batches beyond memory", eval_batches_beyond_memory,
     R + "train.eval_batches=1000000000000: the evaluation batches would hold", 2),
    ("mesh that does not divide the devices",
     lambda t, c: (lambda: shd.mesh_shape(MeshConfig(data=-1, fsdp=3), 8)),
     "does not divide the 8 devices", 2),
    ("batch not divisible by the data axis", batch_not_divisible,
     "global batch 6 is not divisible by the data-parallel size data*fsdp=4", 2),
    # readers that validate
    ("int32 ids in a .bin without a dtype", lambda t, c: _tokens(  # ids above 65536: as uint16, wrong
        t, "train.bin", np.random.default_rng(0).integers(0, 70_000, 4000), "<i4"),
     "train.bin does not say how wide its ids are", 2),
    ("a configured dtype against the file's name",
     lambda t, c: _tokens(t, "train.int32.bin", np.arange(4000), "<i4", dtype="uint16"),
     "is named as int32 ids but data.options.dtype=uint16", 2),
    ("token rows shorter than T+1", token_rows_too_short,
     "rows hold 9 tokens, shorter than seq_len+1=17", 2),
    ("missing corpus directory", lambda t, c: _text(t, t / "nowhere"), "does not exist", 2),
    ("empty corpus directory", empty_corpus, "has no .txt files", 2),
    ("binary files only", binary_corpus, "no usable .txt file: skipped ['a.txt', 'b.txt']", 2),
    ("corpus too small for one batch",
     lambda t, c: _text(t, write_corpus(t / "s", generated_docs(5, 4, n_lines=10)), 256, 128, 60),
     "needs at least 32769 tokens", 2),
    ("vocabulary below the corpus's characters", vocab_below_characters,
     "vocab_size=12 is too small for this corpus", 2),
    ("vocabulary above what the corpus supports", lambda t, c: _text(t, write_corpus(
        t / "c", ["a tiny corpus\nof two lines\n", "and one more\n"]), vocab=5000),
     "vocab_size=5000 is too large for this corpus (this corpus supports at most ", 2),
    ("tokenizer vocabulary larger than the model's",
     lambda t, c: (lambda: resolve_vocab(overrides.apply(tiny_cfg(), {"model.vocab_size": 48}),
                                         64)),
     "model.vocab_size=48 is smaller than the data's vocabulary (64 tokens)", 2),
    # workdirs
    ("workdir holding another model", other_model_workdir,
     "holds a run with a different configuration", 2),
    ("an imported (params-only) workdir", import_as_workdir, "holds parameters only (an import", 2),
    ("workdir not writable", workdir_not_writable, "cannot create", 2),
    ("workdir past train.steps", past_steps, "is already at step 2, past train.steps=1", 2),
]


@pytest.mark.parametrize("name,setup,expected,code", TRAIN_ROWS, ids=[r[0] for r in TRAIN_ROWS])
def test_train_refuses(name, setup, expected, code, tmp_path, ds, run_dir):
  action = setup(tmp_path, {"ds": ds, "run_dir": run_dir})
  before = snapshot(tmp_path)
  check_line(*refusal(action), expected, code)
  assert_unchanged(tmp_path, before)


# ----------------------------------------------------------------------------- train (CLI)
def _train(*args):
  return lambda d, _: ["experiments.train", "--config=tiny", f"--workdir={d}/w", *args]


TRAIN_CLI = [
    ("unknown config name", lambda d, _: ["experiments.train", "--config=nope", f"--workdir={d}"],
     "error: flag --config=nope: unknown config name 'nope'", 2),
    ("negative stop_after", _train("--stop_after=-1"), "error: flag --stop_after=-1", 2),
]


@pytest.fixture(scope="module")
def train_cli(tmp_path_factory):
  return run_table(tmp_path_factory.mktemp("train_cli"), TRAIN_CLI, None)


@pytest.mark.e2e  # starts a command-line process
@pytest.mark.parametrize("name,setup,expected,code", TRAIN_CLI, ids=[r[0] for r in TRAIN_CLI])
def test_train_cli_refuses(name, setup, expected, code, train_cli):
  result, before, d = train_cli[name]
  check_cli(result, expected, code)
  assert_unchanged(d, before)


# ----------------------------------------------------------------------------- verification gaps
def test_a_step_without_its_manifest_is_restored_with_a_warning(run_dir, tmp_path, caplog):
  from sbjax.model import Model

  shutil.copytree(run_dir, tmp_path / "run")
  (tmp_path / "run" / "checkpoints" / "2" / ckpt.MANIFEST_FILE).unlink()
  cfg = tiny_cfg()
  abstract = ckpt.abstract_with_shardings(Model(cfg.model).abstract_params())
  with caplog.at_level("WARNING", logger="sbjax"):
    step, *_ = ckpt.restore_latest_good(tmp_path / "run", abstract)
  assert step == 2 and ckpt.unverified_steps(tmp_path / "run", [0, 1, 2]) == [2]
  warned = [r for r in caplog.records if r.name == "sbjax" and r.levelname == "WARNING"]
  assert len(warned) == 1 and "checkpoint step 2 in" in warned[0].getMessage() and \
      "no checksum manifest" in warned[0].getMessage()
