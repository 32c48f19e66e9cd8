"""The bad inputs of public checkpoint series on real tokens (README "Errors" table),
held to ``test_bad_inputs``' standard: one error whose first line names the problem, the
message says what to do, and nothing is lost: every file under the test's directory (the
token files, the HF cache, the imported workdir that is analysed, an existing workdir that
an import was aimed at) keeps its bytes (``assert_nothing_lost``)."""

import shutil

import numpy as np
import pytest

from sbjax.cli import convert as convert_cli
from sbjax.analysis import analyze_run
from sbjax.analysis.settings import Settings
from sbjax.config import DataConfig, ModelConfig
from sbjax.data import hf_tokenizer, make_dataset
from tests._corpus import generated_docs, write_corpus
from tests._hf_cache import exported_neox, write_hf_cache
from tests._unicode_corpus import unicode_docs
from tests.integration.test_bad_inputs import assert_nothing_lost, snapshot

V = 53
MC = ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=32)
QUIET = dict(progress=False, figures=False, eval_sequences=4, cka_sequences=4)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
  """An HF cache of two revisions (written by sbjax's exporter) and its import."""
  d = tmp_path_factory.mktemp("series")
  for s in (0, 1):
    exported_neox(MC, d / f"m{s}", s)
  repo = write_hf_cache(d / "cache", "EleutherAI/tiny", {"step0": d / "m0", "step1000": d / "m1"})
  convert_cli.import_to_workdir(str(repo), str(d / "work"))
  return repo, d / "work"


def ids_beyond_vocab(tmp, repo, work):
  rows = np.random.default_rng(1).integers(0, V, (6, 9)).astype(np.int32)
  rows[2, 4] = V + 7
  np.save(tmp / "big.npy", rows)
  return lambda: analyze_run(tmp / "work", Settings(tokens=str(tmp / "big.npy"), **QUIET))


def rows_too_short(tmp, repo, work):
  np.save(tmp / "short.npy", np.zeros((6, 9), np.int32))
  dc = DataConfig(source="tokens", options=dict(path=str(tmp / "short.npy"), vocab=V))
  return lambda: make_dataset(dc, seq_len=16, global_batch_size=2, workdir=str(tmp / "run"))


def tokenizer_beyond_model(tmp, repo, work):
  docs = generated_docs(3, 4, 20)
  corpus = write_corpus(tmp / "corpus", docs)
  tok = hf_tokenizer.train_bpe(docs, tmp / "tokenizer.json", vocab_size=300)
  over = ("source=text", f"path={corpus}", f"tokenizer={tok.path}", "seq_len=8")
  return lambda: analyze_run(tmp / "work", Settings(data=over, **QUIET))


def revision_missing(tmp, repo, work):
  (tmp / "new").mkdir()
  (tmp / "new" / "keep.txt").write_text("an earlier file of the target workdir\n")
  return lambda: convert_cli.import_to_workdir(str(tmp / "cache" / repo.name),
                                               str(tmp / "new"), steps="0,4000")


def weights_truncated(tmp, repo, work):
  snap = tmp / "cache" / repo.name / "snapshots"
  blob = next(snap.glob("*/model.safetensors")).resolve()
  data = blob.read_bytes()
  blob.unlink()
  blob.write_bytes(data[:-100])  # a partial download
  return lambda: convert_cli.import_to_workdir(str(tmp / "cache" / repo.name), str(tmp / "new"))


def vocab_below_characters(tmp, repo, work):
  corpus = write_corpus(tmp / "corpus", unicode_docs())  # 202 distinct characters
  dc = DataConfig(source="text", options=dict(path=str(corpus), vocab_size=12))
  return lambda: make_dataset(dc, seq_len=16, global_batch_size=2, workdir=str(tmp / "run"))


ROWS = [  # name, setup, problem (first line), what to do
    ("token file with ids >= vocab_size", ids_beyond_vocab,
     "token id 60 at row 2, column 4 is outside [0, model.vocab_size=53)",
     "Use token ids from the model's own tokenizer"),
    ("token file whose rows are shorter than T+1", rows_too_short,
     "rows hold 9 tokens, shorter than seq_len+1=17", "Use train.seq_len=8 or less"),
    ("tokenizer whose vocabulary exceeds the model's", tokenizer_beyond_model,
     "the data's vocabulary (300 tokens", "Tokenise with the model's own tokenizer"),
    ("cache directory without the requested revision", revision_missing,
     "requested revision step(s) [4000] not found", "available steps: [0, 1000]"),
    ("revision whose weights are truncated", weights_truncated,
     "weight file model.safetensors is truncated or corrupt", "Download the revision again"),
    ("vocabulary smaller than the corpus's characters", vocab_below_characters,
     "vocab_size=12 is too small for this corpus", "(data.options.vocab_size)"),
]


@pytest.mark.parametrize("name,setup,problem,todo", ROWS, ids=[r[0] for r in ROWS])
def test_series_bad_input(name, setup, problem, todo, series, tmp_path):
  repo, work = series
  shutil.copytree(repo.parent, tmp_path / "cache", symlinks=True)
  shutil.copytree(work, tmp_path / "work")
  action = setup(tmp_path, repo, work)
  before = snapshot(tmp_path)
  with pytest.raises((ValueError, OSError)) as e:
    action()
  msg = str(e.value)
  first = msg.splitlines()[0]
  assert problem in first, f"the first line does not name the problem: {first!r}"
  assert todo in msg and "Traceback" not in msg and len(first) < 600, msg
  assert_nothing_lost(tmp_path, before)
  assert not (tmp_path / "new" / "config.json").exists()  # no import was started
