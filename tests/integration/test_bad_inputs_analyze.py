"""Bad inputs of ``analyze``, in-process and as the command (checked as test_bad_inputs says)."""

import json
import shutil

import numpy as np
import pytest

from sbjax.analysis import analyze_run
from sbjax.analysis.settings import Settings
from sbjax.cli import convert as convert_cli
from sbjax.config import ModelConfig
from sbjax.data import hf_tokenizer
from tests._corpus import generated_docs, write_corpus
from tests._hf_cache import exported_neox, write_hf_cache
from tests.integration.test_bad_inputs import (assert_unchanged, check_cli, check_line, refusal,
                                               run_table, snapshot)

QUIET = dict(progress=False, figures=False, eval_sequences=4, cka_sequences=4)
V = 53  # the imported series' vocabulary
MC = ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=32)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
  """An imported Hugging Face series (two revisions written by sbjax's exporter)."""
  d = tmp_path_factory.mktemp("series")
  for s in (0, 1):
    exported_neox(MC, d / f"m{s}", s)
  repo = write_hf_cache(d / "cache", "EleutherAI/tiny", {"step0": d / "m0", "step1000": d / "m1"})
  convert_cli.import_to_workdir(str(repo), str(d / "work"))
  return d / "work"


def _analyse(wd="run", **settings):
  return lambda tmp: (lambda: analyze_run(tmp / wd, Settings(**{**QUIET, **settings})))


def _tokens(name, arr, **settings):
  def setup(tmp):
    (np.save(tmp / name, arr) if name.endswith(".npy") else arr.tofile(tmp / name))
    return _analyse(tokens=str(tmp / name), **settings)(tmp)
  return setup


def _ids(n_rows, width, high, bad=None):
  rows = np.random.default_rng(1).integers(0, high, (n_rows, width)).astype(np.int32)
  if bad is not None:
    rows[2, 4] = bad
  return rows


def foreign_checkpoints(tmp):
  cfg = json.loads((tmp / "run" / "config.json").read_text())
  cfg["model"]["d_model"] = 16
  (tmp / "run" / "config.json").write_text(json.dumps(cfg))
  return _analyse(groups=("spectrum",))(tmp)


def config_not_json(tmp):
  (tmp / "run" / "config.json").write_text("{not json")
  return _analyse()(tmp)


def out_not_writable(tmp):
  (tmp / "a_file").write_text("x\n")
  return _analyse(groups=("spectrum",), out_dir=str(tmp / "a_file" / "o"))(tmp)


def _text(with_tokenizer: bool):
  def setup(tmp):
    docs = generated_docs(3, 4, 20)
    over = ("source=text", f"path={write_corpus(tmp / 'corpus', docs)}", "seq_len=8")
    if with_tokenizer:
      tok = hf_tokenizer.train_bpe(docs, tmp / "tokenizer.json", vocab_size=300)
      over += (f"tokenizer={tok.path}",)
    return _analyse("series", data=over)(tmp)
  return setup


def no_checkpoints(tmp):
  shutil.rmtree(tmp / "run" / "checkpoints")
  return _analyse()(tmp)


def no_config(tmp):
  (tmp / "run" / "config.json").unlink()
  return _analyse()(tmp)


def _collapse(feats=None, labels=None):
  """The collapse metrics (as the analysis calls them) of random features, or of ``feats``."""
  from sbjax import metrics

  rng = np.random.default_rng(0)
  h = rng.normal(size=(64, 4)).astype(np.float32) if feats is None else feats
  y = rng.integers(0, 8, 64) if labels is None else labels
  w = rng.normal(size=(8, 4)).astype(np.float32)
  return lambda tmp: (lambda: metrics.collapse_metrics(h, y, w))


def _with(arr, index, value):
  arr = np.array(arr)
  arr[index] = value
  return arr


def setting(**kw):
  return lambda tmp: (lambda: Settings(**kw))


S = "invalid analysis setting: "
ANALYZE_ROWS = [  # name, setup, the error line holds, exit status
    # work sized before it starts: what the data cannot give is refused, not run for hours
    ("evaluation sequences beyond the validation split", _analyse(eval_sequences=10**8),
     "holds 255 windows of T+1=33 tokens, fewer than the 100000000 the analysis samples", 2),
    ("collapse sequences beyond the train split",
     _analyse(groups=("collapse",), collapse_sequences=10**8),
     "the train split of", 2),
    ("sequences beyond a token file", _tokens("few.npy", _ids(6, 9, 60), eval_sequences=8),
     "few.npy holds 6 windows of T+1=9 tokens, fewer than the 8", 2),
    # bounds declared with the settings
    ("no evaluation sequences", setting(eval_sequences=0),
     S + "eval_sequences=0; allowed: an integer >= 1", 2),
    ("unknown CKA positions", setting(cka_tokens="first"), S + "cka_tokens='first'", 2),
    ("unknown metric group", setting(groups=("loss", "entropy")), S + "groups=('loss', 'entropy')",
     2),
    # readers that validate
    ("token ids beyond the model's vocabulary", _tokens("big.npy", _ids(6, 9, 60, bad=70)),
     "token id 70 at row 2, column 4 is outside [0, model.vocab_size=64)", 2),
    ("token rows longer than max_len", _tokens("long.npy", _ids(4, 70, 60)),
     "rows of 70 tokens make windows of T=69 > the model's max_len=64", 2),
    ("config.json that is no JSON", config_not_json, "config.json is not valid JSON", 2),
    ("checkpoints of another model", foreign_checkpoints,
     "written by another model configuration", 2),
    ("an unknown data field", _analyse(data=("nope=1",)),
     "invalid config key 'data.options.nope'", 2),
    ("an imported series on synthetic data", _analyse("series"),
     "is an imported checkpoint series", 2),
    ("a tokenizer larger than the imported model", _text(True),
     "the data's vocabulary (300 tokens", 2),
    ("a text corpus without the imported model's tokenizer", _text(False),
     "a text corpus must be tokenised with the model's own tokenizer", 2),
    ("features holding NaN", _collapse(feats=_with(np.zeros((64, 4), np.float32), (3, 1), np.nan)),
     "contains 1 non-finite value(s)", 2),
    ("labels beyond the classes", _collapse(labels=_with(np.zeros(64, int), 5, 8)),
     "labels must lie in [0, V=8)", 2),
    ("one class only", _collapse(labels=np.full(64, 3)), "need at least 2 analysed classes", 2),
    # folders and steps
    ("missing workdir", _analyse("nowhere"), "does not exist", 2),
    ("a folder that is no workdir", no_config, "config.json not found", 2),
    ("a workdir without checkpoints", no_checkpoints, "no checkpoints to analyse", 2),
    ("steps that are not checkpointed", _analyse(steps=(7,)), "steps [7] are not checkpointed", 2),
    ("output folder not writable", out_not_writable, "a_file/o: Not a directory", 2),
]


@pytest.mark.parametrize("name,setup,expected,code", ANALYZE_ROWS,
                         ids=[r[0] for r in ANALYZE_ROWS])
def test_analyze_refuses(name, setup, expected, code, tmp_path, run_dir, series):
  shutil.copytree(run_dir, tmp_path / "run")
  shutil.copytree(series, tmp_path / "series")
  action = setup(tmp_path)
  before = snapshot(tmp_path)
  check_line(*refusal(action), expected, code)
  assert_unchanged(tmp_path, before)


def _cli(*args):
  def setup(d, run_dir):
    shutil.copytree(run_dir, d / "run")
    return ["experiments.analyze", f"--workdir={d}/run", "--progress=false",
            "--figures=false", *args]
  return setup


ANALYZE_CLI = [
    ("seed beyond the RNG's range", _cli(f"--seed={2**70}"),
     "error: invalid analysis setting: seed=1180591620717411303424", 2),
    ("unknown CKA positions", _cli("--cka_tokens=first"), "error: flag --cka_tokens=first", 2),
]


@pytest.fixture(scope="module")
def analyze_cli(tmp_path_factory, run_dir):
  return run_table(tmp_path_factory.mktemp("analyze_cli"), ANALYZE_CLI, run_dir)


@pytest.mark.e2e  # starts a command-line process
@pytest.mark.parametrize("name,setup,expected,code", ANALYZE_CLI, ids=[r[0] for r in ANALYZE_CLI])
def test_analyze_cli_refuses(name, setup, expected, code, analyze_cli):
  result, before, d = analyze_cli[name]
  check_cli(result, expected, code)
  assert_unchanged(d, before)
